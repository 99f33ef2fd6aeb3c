#!/usr/bin/env bash
# Builds the libFuzzer targets (fuzz/CMakeLists.txt, clang, ASan + UBSan) and runs each for a
# bounded time on a scratch copy of its committed seed corpus (the repository is never written).
# Prints executions and the result per target; exits non-zero if any target crashed, leaked, hit a
# sanitizer report or timed out on an input, and prints the path of the input that did it.
#
# Usage: scripts/fuzz.sh [--seconds N] [--keep] [target...]
#   --seconds N  time per target (default: $TANDEM_FUZZ_SECONDS or 60)
#   --keep       keep every scratch directory (grown corpus, logs), not only failing ones
#   target       safetensors_fuzz tokenizer_fuzz tokenizer_json_fuzz jinja_fuzz request_fuzz
#                frame_fuzz control_fuzz session_preauth_fuzz (default: all; fuzz/README.md says what
#                each feeds)
# Environment: TANDEM_FUZZ_BUILD (build dir, default build-fuzz), TANDEM_JOBS (build jobs, 2).
# Reproduce a finding: build-fuzz/bin/<target> <crash file>   (from the repo root)
set -euo pipefail
cd "$(dirname "$0")/.."
root=$(pwd)

declare -A corpus=(
  [safetensors_fuzz]=engine/fuzz/corpus/safetensors
  [tokenizer_fuzz]=engine/fuzz/corpus/tokenizer
  [tokenizer_json_fuzz]=engine/fuzz/corpus/tokenizer_json
  [jinja_fuzz]=engine/fuzz/corpus/jinja
  [request_fuzz]=router/api/fuzz/corpus
  [frame_fuzz]=kvtransfer/fuzz/corpus
  [control_fuzz]=worker/handoff/fuzz/corpus
  [session_preauth_fuzz]=worker/fuzz/corpus
)
# Extra libFuzzer flags per target: whole files are larger than libFuzzer's 4096-byte default.
declare -A extra=(
  [tokenizer_json_fuzz]="-max_len=16384"
  [jinja_fuzz]="-max_len=8192"
  [safetensors_fuzz]="-max_len=8192"
)
all_targets=(safetensors_fuzz tokenizer_fuzz tokenizer_json_fuzz jinja_fuzz request_fuzz
             frame_fuzz control_fuzz session_preauth_fuzz)

seconds="${TANDEM_FUZZ_SECONDS:-60}"
keep=0
targets=()
while [ $# -gt 0 ]; do
  case "$1" in
    --seconds) seconds="$2"; shift 2 ;;
    --seconds=*) seconds="${1#*=}"; shift ;;
    --keep) keep=1; shift ;;
    -h|--help) sed -n '2,13p' "$0"; exit 0 ;;
    *)
      [ -n "${corpus[$1]:-}" ] || { echo "fuzz.sh: unknown target '$1' (known: ${all_targets[*]})" >&2; exit 2; }
      targets+=("$1"); shift ;;
  esac
done
[ ${#targets[@]} -gt 0 ] || targets=("${all_targets[@]}")
[[ "$seconds" =~ ^[0-9]+$ ]] && [ "$seconds" -gt 0 ] || { echo "fuzz.sh: --seconds wants a positive integer" >&2; exit 2; }

# libFuzzer ships with clang (Debian: clang + libclang-rt-14-dev, see scripts/install-deps.sh).
if ! command -v clang++ >/dev/null; then
  echo "fuzz.sh: clang++ not found; the fuzzers need clang and libFuzzer" \
       "(scripts/install-deps.sh installs the Debian packages clang and libclang-rt-14-dev)" >&2
  exit 1
fi
probe=$(mktemp -d)
printf 'extern "C" int LLVMFuzzerTestOneInput(const unsigned char*, unsigned long) { return 0; }\n' \
  > "$probe/p.cc"
if ! clang++ -fsanitize=fuzzer,address,undefined "$probe/p.cc" -o "$probe/p" 2> "$probe/err"; then
  cat "$probe/err" >&2
  echo "fuzz.sh: clang++ cannot link libFuzzer with ASan/UBSan (missing libclang-rt-14-dev?" \
       "scripts/install-deps.sh installs it)" >&2
  rm -rf "$probe"
  exit 1
fi
rm -rf "$probe"

build="${TANDEM_FUZZ_BUILD:-build-fuzz}"
if [ ! -f "$build/CMakeCache.txt" ]; then
  generator=()
  command -v ninja >/dev/null && generator=(-G Ninja)
  CC=clang CXX=clang++ cmake -S fuzz -B "$build" "${generator[@]}" > /dev/null
fi
echo "fuzz.sh: building ${targets[*]} in $build"
cmake --build "$build" -j "${TANDEM_JOBS:-2}" --target "${targets[@]}"

# run_one T: runs target T on a scratch copy of its corpus; its report goes to stdout, its
# summary line to $outdir/T.summary, and "failed" to $outdir/T.failed on any finding.
outdir=$(mktemp -d /tmp/tandem-fuzz-run.XXXXXX)
run_one() {
  local t=$1 work seeds rc execs rate units artifact result
  work=$(mktemp -d "/tmp/tandem-fuzz-$t.XXXXXX")
  mkdir -p "$work/corpus" "$work/artifacts"
  cp -a "${corpus[$t]}/." "$work/corpus/"
  seeds=$(find "$work/corpus" -type f | wc -l)
  echo "fuzz.sh: $t: ${seconds}s on $seeds seeds from ${corpus[$t]} (scratch: $work)"
  set +e
  # shellcheck disable=SC2086
  ASAN_OPTIONS="detect_leaks=1:abort_on_error=0" UBSAN_OPTIONS="print_stacktrace=1" \
    "$root/$build/bin/$t" -max_total_time="$seconds" -timeout=30 -rss_limit_mb=2048 \
    -print_final_stats=1 -artifact_prefix="$work/artifacts/" ${extra[$t]:-} \
    "$work/corpus" > "$work/log" 2>&1
  rc=$?
  set -e
  execs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$work/log" | tail -1)
  rate=$(sed -n 's/^stat::average_exec_per_sec: *//p' "$work/log" | tail -1)
  units=$(find "$work/corpus" -type f | wc -l)
  artifact=$(find "$work/artifacts" -type f | head -1)
  if [ "$rc" -eq 0 ] && [ -z "$artifact" ]; then
    result="ok"
  else
    result="FAILED (exit $rc)"
    touch "$outdir/$t.failed"
    echo "---- $t: last lines of $work/log"
    tail -n 60 "$work/log"
    echo "----"
    if [ -n "$artifact" ]; then
      echo "fuzz.sh: $t: crashing input: $artifact"
      echo "fuzz.sh: reproduce with: $build/bin/$t $artifact"
    fi
  fi
  printf '%-20s %12s execs %8s exec/s %6s corpus units  %s\n' "$t" "${execs:-?}" \
    "${rate:-?}" "$units" "$result" > "$outdir/$t.summary"
  if [ "$result" = "ok" ] && [ "$keep" = 0 ]; then rm -rf "$work"; fi
}

# Targets run side by side, $TANDEM_FUZZ_PARALLEL (default: the core count) at a time; each is
# single-threaded, so on 2 cores the six targets take three rounds of $seconds.
parallel="${TANDEM_FUZZ_PARALLEL:-$(nproc)}"
for t in "${targets[@]}"; do
  [ -d "${corpus[$t]}" ] || { echo "fuzz.sh: $t: seed corpus ${corpus[$t]} is missing" >&2; exit 1; }
done
for t in "${targets[@]}"; do
  while [ "$(jobs -rp | wc -l)" -ge "$parallel" ]; do wait -n || true; done
  run_one "$t" > "$outdir/$t.out" 2>&1 &
done
wait
failed=()
summary=()
for t in "${targets[@]}"; do
  cat "$outdir/$t.out"
  summary+=("$(cat "$outdir/$t.summary" 2>/dev/null || echo "$t: no result")")
  if [ -e "$outdir/$t.failed" ] || [ ! -e "$outdir/$t.summary" ]; then failed+=("$t"); fi
done
rm -rf "$outdir"

echo
echo "fuzz.sh: ${seconds}s per target"
printf '  %s\n' "${summary[@]}"
if [ ${#failed[@]} -gt 0 ]; then
  echo "fuzz.sh: FAILED: ${failed[*]} (scratch directories with the logs and inputs kept under /tmp)"
  exit 1
fi
echo "fuzz.sh: all ${#targets[@]} targets ran clean"
