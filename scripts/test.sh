#!/usr/bin/env bash
# The whole test suite: dependencies (if missing), format check, references to repository files
# (scripts/check-refs.py), Release build, every ctest test
# (unit + integration), then the unit tests again under AddressSanitizer + UndefinedBehaviorSanitizer,
# then every fuzzer for a bounded time (scripts/fuzz.sh).
# Exits non-zero on any failure. Usage: scripts/test.sh [--no-sanitize]
set -euo pipefail
cd "$(dirname "$0")/.."
start=$(date +%s)
sanitize=1
[ "${1:-}" = "--no-sanitize" ] && sanitize=0
jobs="${TANDEM_JOBS:-$(nproc)}"

section() { printf '\n=== %s (%ds)\n' "$1" "$(( $(date +%s) - start ))"; }

section "dependencies"
bash scripts/install-deps.sh

section "format and references"
bash scripts/check-format.sh
python3 scripts/check-refs.py

section "build (Release)"
bash scripts/build.sh

section "tests (unit + integration)"
ctest --test-dir build --output-on-failure -j "$jobs" --timeout 600

if [ "$sanitize" = 1 ]; then
  section "unit tests under ASan + UBSan"
  # -O1 -g1 (line tables) halves the compile time of -O2 -g under the sanitizers and keeps
  # file:line in reports.
  asan_flags=(-DCMAKE_CXX_FLAGS_RELWITHDEBINFO="-O1 -g1 -DNDEBUG" -DCMAKE_C_FLAGS_RELWITHDEBINFO="-O1 -g1 -DNDEBUG")
  generator=()
  command -v ninja >/dev/null && generator=(-G Ninja)
  [ -f build-asan/CMakeCache.txt ] || cmake -S . -B build-asan "${generator[@]}" \
      -DCMAKE_BUILD_TYPE=RelWithDebInfo -DTANDEM_SANITIZE=ON -DTANDEM_UNIT_TESTS_ONLY=ON \
      -DTANDEM_BUILD_BENCH=OFF "${asan_flags[@]}"
  cmake --build build-asan -j "$jobs" --target tests
  ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 UBSAN_OPTIONS=print_stacktrace=1 \
    ctest --test-dir build-asan --output-on-failure -j "$jobs" -L unit --timeout 900
fi

section "fuzzers"
# Every libFuzzer target for $TANDEM_FUZZ_SECONDS (default 60) s on a copy of its seed corpus.
bash scripts/fuzz.sh

section "done"
echo "test.sh: all suites passed in $(( $(date +%s) - start ))s"
