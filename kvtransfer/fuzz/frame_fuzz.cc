// libFuzzer entry point over every parser that reads bytes from the network: frame headers,
// handshake bodies, descriptors and compatibility records. Build and run:
// scripts/fuzz.sh frame_fuzz (fuzz/CMakeLists.txt); seeds in kvtransfer/fuzz/corpus/, written by
// the real encoders (build-fuzz/bin/make_seeds).
// The same corpus-free mutation loop also runs as a unit test (tests/kvtransfer/parser_fuzz_test).
#include <cstddef>
#include <cstdint>
#include <string>

#include "kvtransfer/fuzz/parse_all.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  tandem::kv::ParseAllForFuzzing(data, size);
  return 0;
}
