# Helpers shared by the modules' CMakeLists.

# tandem_warnings(target): our warning set on a target we own.
function(tandem_warnings target)
  target_compile_options(${target} PRIVATE ${TANDEM_WARNINGS})
endfunction()

# tandem_test(NAME name SOURCES ... DEPS ... [LABELS ...] [TIMEOUT s]): one GoogleTest binary,
# registered with ctest per test case. Labels: "unit" (default; also run under the sanitizers),
# "integration" (starts processes), "needs_rdma_nic" (skipped without a device; DESIGN.md "Build and tests").
function(tandem_test)
  cmake_parse_arguments(T "" "NAME;TIMEOUT" "SOURCES;DEPS;LABELS" ${ARGN})
  if(NOT T_LABELS)
    set(T_LABELS unit)
  endif()
  if(NOT T_TIMEOUT)
    set(T_TIMEOUT 300)
  endif()
  if(TANDEM_UNIT_TESTS_ONLY AND NOT "unit" IN_LIST T_LABELS)
    return()
  endif()
  add_executable(${T_NAME} ${T_SOURCES})
  target_link_libraries(${T_NAME} PRIVATE ${T_DEPS} GTest::gtest GTest::gmock GTest::gtest_main)
  target_compile_definitions(${T_NAME} PRIVATE
    TANDEM_SOURCE_DIR="${PROJECT_SOURCE_DIR}" TANDEM_BINARY_DIR="${CMAKE_BINARY_DIR}")
  tandem_warnings(${T_NAME})
  include(GoogleTest)
  gtest_discover_tests(${T_NAME}
    PROPERTIES LABELS "${T_LABELS}" TIMEOUT ${T_TIMEOUT}
    DISCOVERY_TIMEOUT 60)
  add_dependencies(tests ${T_NAME})
endfunction()

# tandem_module(NAME name [PUBLIC_DEPS ...] [PRIVATE_DEPS ...]): the module's library from every
# .cc below its folder except binaries' entry points (main.cc, *_main.cc). Sources are globbed
# with CONFIGURE_DEPENDS so adding a file needs no CMake edit; dependencies are listed here.
function(tandem_module)
  cmake_parse_arguments(M "" "NAME" "PUBLIC_DEPS;PRIVATE_DEPS;EXTRA_SOURCES" ${ARGN})
  file(GLOB_RECURSE srcs CONFIGURE_DEPENDS ${CMAKE_CURRENT_SOURCE_DIR}/*.cc)
  list(FILTER srcs EXCLUDE REGEX "(/main\\.cc|_main\\.cc|/fuzz/.*)$")
  # A subfolder with its own CMakeLists.txt is a module of its own (e.g. router/api).
  file(GLOB_RECURSE sub_lists CONFIGURE_DEPENDS ${CMAKE_CURRENT_SOURCE_DIR}/*/CMakeLists.txt)
  foreach(sub_list ${sub_lists})
    get_filename_component(sub_dir ${sub_list} DIRECTORY)
    list(FILTER srcs EXCLUDE REGEX "^${sub_dir}/")
  endforeach()
  if(NOT srcs AND NOT M_EXTRA_SOURCES)
    # A module with headers only (so far): its users still get its include path and deps.
    add_library(${M_NAME} INTERFACE)
    target_include_directories(${M_NAME} INTERFACE ${PROJECT_SOURCE_DIR} ${PROJECT_BINARY_DIR})
    target_link_libraries(${M_NAME} INTERFACE ${M_PUBLIC_DEPS})
    return()
  endif()
  add_library(${M_NAME} STATIC ${srcs} ${M_EXTRA_SOURCES})
  target_include_directories(${M_NAME} PUBLIC ${PROJECT_SOURCE_DIR} ${PROJECT_BINARY_DIR})
  target_link_libraries(${M_NAME} PUBLIC ${M_PUBLIC_DEPS} PRIVATE ${M_PRIVATE_DEPS})
  tandem_warnings(${M_NAME})
endfunction()

# tandem_binary(NAME name SOURCES ... DEPS ...): an executable landing in build/bin.
function(tandem_binary)
  cmake_parse_arguments(B "" "NAME" "SOURCES;DEPS" ${ARGN})
  add_executable(${B_NAME} ${B_SOURCES})
  target_link_libraries(${B_NAME} PRIVATE ${B_DEPS})
  tandem_warnings(${B_NAME})
endfunction()
