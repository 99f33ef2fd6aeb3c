#!/usr/bin/env bash
# soak.sh: a bounded soak run of a PD cluster (1 tandem-prefill, 1 tandem-decode and a
# tandem-router --pd-disaggregation, started with deploy/local-cluster.sh as an operator would)
# under a steady, bounded load from tandem-bench; then a verdict on what leaked.
#
#   scripts/soak.sh [--minutes N] [--base-port P] [--run-dir DIR] [--concurrency C]
#                   [--rate R] [--fd-slack K] [--model DIR]
#
# Load, in rounds until N minutes (default 10) have passed: tandem-bench rounds of 40 prompts at
# R requests/s (default 6) with at most C in flight (default 4), rotating streamed and
# non-streamed, /generate, /v1/completions and /v1/chat/completions, short (32 tokens) and long
# (400 tokens) prompts; plus, every round, 3 clients that start a long stream and hang up after
# its first bytes (the router must cancel both legs).
#
# Reports: requests sent and failed; RSS of each daemon at start, after warm-up, half-way and at
# the end (growth over the second half: the KV pool's pages are touched during the first), and
# the tokens held by the router's cache_aware prefix tree at the same points (it keeps prompts
# up to --max-tree-size, so the router's RSS grows with it); open
# file descriptors of each daemon (/proc/PID/fd) at start, after warm-up and at the end; KV
# blocks free/total of both workers (/metrics) after warm-up and at the end, both after the
# router's /flush_cache.
#
# Exit status: 0 when no request failed, no daemon's fd count grew by more than K (default 8)
# from warm-up to the end, every KV block was free at the end and every daemon is still alive;
# 1 otherwise; 2 on usage errors. Not part of `ctest`; run it by hand (under `nice` on a shared
# machine). Environment: TANDEM_BIN (binaries, default build/bin).
set -euo pipefail

repo=$(cd "$(dirname "$0")/.." && pwd)
prog=$(basename "$0")
die() {
  echo "$prog: $1" >&2
  exit "${2:-1}"
}

minutes=10
base_port=31000
run_dir="$repo/run/soak"
concurrency=4
rate=6
fd_slack=8
model="$repo/models/tandem-tiny-english"
while [ $# -gt 0 ]; do
  case "$1" in
    -h | --help) sed -n '2,26p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
  esac
  [ $# -ge 2 ] || die "$1 needs a value" 2
  case "$1" in
    --minutes) minutes=$2 ;;
    --base-port) base_port=$2 ;;
    --run-dir) run_dir=$2 ;;
    --concurrency) concurrency=$2 ;;
    --rate) rate=$2 ;;
    --fd-slack) fd_slack=$2 ;;
    --model) model=$2 ;;
    *) die "unknown option '$1'" 2 ;;
  esac
  shift 2
done
for v in minutes base_port concurrency fd_slack; do
  [[ ${!v} =~ ^[0-9]+$ ]] || die "--${v//_/-} must be a non-negative integer, not '${!v}'" 2
done
[[ $rate =~ ^[0-9]+([.][0-9]+)?$ ]] || die "--rate must be a number, not '$rate'" 2
[ "$minutes" -ge 1 ] || die "--minutes must be at least 1" 2
bin=${TANDEM_BIN:-$repo/build/bin}
export TANDEM_BIN=$bin
[ -x "$bin/tandem-bench" ] || die "$bin/tandem-bench is missing (build it, or set TANDEM_BIN)" 2
[ -f "$model/config.json" ] || die "--model $model has no config.json" 2

router_port=$base_port
prefill_http=$((base_port + 4)) # local-cluster.sh: worker k uses P+3k (gRPC), P+3k+1 (HTTP)
decode_http=$((base_port + 7))
router="http://127.0.0.1:$router_port"
TANDEM_ADMIN_KEY="soak-admin-$(head -c 12 /dev/urandom | od -An -tx1 | tr -d ' \n')"
export TANDEM_ADMIN_KEY
export TANDEM_KV_CACHE_MEMORY=${TANDEM_KV_CACHE_MEMORY:-128MiB}
mkdir -p "$run_dir"
results="$run_dir/bench.jsonl"
: > "$results"
cluster=("$repo/deploy/local-cluster.sh")

# shellcheck disable=SC2317  # run by the trap
cleanup() { "${cluster[@]}" stop --run-dir "$run_dir" > /dev/null 2>&1 || true; }
trap cleanup EXIT
"${cluster[@]}" start --prefill 1 --decode 1 --model "$model" --run-dir "$run_dir" \
  --base-port "$base_port" || die "the cluster did not start (logs in $run_dir)"

names=(router prefill-1 decode-1)
declare -A pid
for n in "${names[@]}"; do
  read -r "pid[$n]" _ < "$run_dir/$n.pid"
done

rss_kib() { awk '/^VmRSS:/ {print $2}' "/proc/$1/status" 2> /dev/null || echo 0; }
fds() { find "/proc/$1/fd" -mindepth 1 -maxdepth 1 2> /dev/null | wc -l; }
metric() { # metric PORT NAME: the first sample of NAME on 127.0.0.1:PORT/metrics
  curl -s --max-time 5 "http://127.0.0.1:$1/metrics" | awk -v m="$2" '$1 == m {print $2; exit}'
}
blocks() { # blocks PORT: "free/total"
  echo "$(metric "$1" tandem_engine_kv_free_blocks)/$(metric "$1" tandem_engine_kv_total_blocks)"
}
declare -A rss fd tree
snapshot() { # snapshot LABEL
  for n in "${names[@]}"; do
    rss[$1,$n]=$(rss_kib "${pid[$n]}")
    fd[$1,$n]=$(fds "${pid[$n]}")
  done
  # The router's cache_aware prefix tree keeps prompts up to --max-tree-size: RSS growth that
  # follows these tokens is that bound at work, not a leak ("-" under other policies).
  tree[$1]=$(metric "$router_port" tandem_router_cache_aware_tree_tokens || true)
  : "${tree[$1]:=-}"
}

snapshot start

# bench BACKEND INPUT_LEN OUTPUT_LEN STREAM PROMPTS: one tandem-bench round; its result is
# appended to $results. A round that cannot run at all counts its prompts as failed.
bench() {
  local stream_flag=()
  [ "$4" = stream ] || stream_flag=(--disable-stream)
  if ! "$bin/tandem-bench" --backend "$1" --base-url "$router" --model "$model" \
    --dataset-name random --random-input-len "$2" --random-output-len "$3" \
    --random-range-ratio 0.5 --num-prompts "$5" --request-rate "$rate" \
    --max-concurrency "$concurrency" --warmup-requests 0 --seed "$RANDOM" --disable-tqdm \
    "${stream_flag[@]}" --output-file "$results" >> "$run_dir/bench.log" 2>&1; then
    echo "{\"completed\":0,\"failed\":$5,\"round_error\":true}" >> "$results"
  fi
}

# hang_up: starts a long stream, reads its first bytes, closes the connection.
hangups=0
hang_up() {
  local body='{"text":"Tell me a very long fortune about the sea.","stream":true,'
  body+='"sampling_params":{"max_new_tokens":300,"ignore_eos":true}}'
  (
    exec 3<> "/dev/tcp/127.0.0.1/$router_port" || exit 0
    printf 'POST /generate HTTP/1.1\r\nHost: soak\r\nContent-Type: application/json\r\n' >&3
    printf 'Content-Length: %d\r\n\r\n%s' "${#body}" "$body" >&3
    timeout 60 head -c 300 <&3 > /dev/null || true
    exec 3>&-
  ) &
  hangups=$((hangups + 1))
}

# flush_and_read_blocks: empties the prefix caches through the router's admin API, then waits
# (up to 60 s) for every block of both workers to be free; sets blocks_prefill, blocks_decode.
flush_and_read_blocks() {
  for _ in $(seq 1 60); do
    curl -s --max-time 10 -X POST -H "Authorization: Bearer $TANDEM_ADMIN_KEY" \
      "$router/flush_cache" > /dev/null || true
    blocks_prefill=$(blocks $prefill_http)
    blocks_decode=$(blocks $decode_http)
    if all_free "$blocks_prefill" && all_free "$blocks_decode"; then return; fi
    sleep 1
  done
}
all_free() { [ -n "${1%/*}" ] && [ "${1%/*}" != 0 ] && [ "${1%/*}" = "${1#*/}" ]; }

echo "$prog: warm-up"
bench sglang 32 32 stream 20
flush_and_read_blocks
blocks_start_prefill=$blocks_prefill
blocks_start_decode=$blocks_decode
snapshot warm

rounds=(
  "sglang 32 32 stream"
  "sglang-oai 400 64 nostream"
  "sglang-oai-chat 96 48 stream"
  "sglang 400 48 nostream"
  "sglang-oai 32 64 stream"
  "sglang-oai-chat 200 32 nostream"
)
end_at=$((SECONDS + minutes * 60))
round=0
echo "$prog: load for $minutes minute(s): rate $rate/s, at most $concurrency in flight"
while [ "$SECONDS" -lt "$end_at" ]; do
  # shellcheck disable=SC2086
  set -- ${rounds[$((round % ${#rounds[@]}))]}
  for _ in 1 2 3; do hang_up; done
  bench "$1" "$2" "$3" "$4" 40
  wait
  round=$((round + 1))
  if [ -z "${rss[mid,router]:-}" ] && [ $((end_at - SECONDS)) -le $((minutes * 30)) ]; then
    snapshot mid
  fi
  if [ $((round % 6)) = 0 ]; then
    echo "$prog: $round rounds, $(((end_at - SECONDS + 59) / 60)) minute(s) left"
  fi
done

# Idle: every KV block must come back (the prefix caches are flushed first).
flush_and_read_blocks
blocks_end_prefill=$blocks_prefill
blocks_end_decode=$blocks_decode
snapshot end

sum() { jq -s "map(.$1 // 0) | add // 0" "$results"; }
sent_total=$(jq -s 'map((.completed // 0) + (.failed // 0)) | add // 0' "$results")
completed=$(sum completed)
failed=$(sum failed)

status=0
echo
echo "== soak: $minutes minute(s), $round rounds, $(date -u +%FT%TZ), load average $(cut -d' ' -f1-3 /proc/loadavg)"
echo "requests sent: $sent_total   completed: $completed   failed: $failed   (+ $hangups client hang-ups mid-stream)"
[ "$failed" = 0 ] || { echo "FAIL: $failed requests failed (see $run_dir/bench.log)"; status=1; }
printf '%-10s %10s %10s %10s %10s %9s   %6s %6s %6s\n' daemon "RSS start" "RSS warm" \
  "RSS half" "RSS end" "half->end" "fd st" "fd wm" "fd end"
for n in "${names[@]}"; do
  : "${rss[mid,$n]:=${rss[warm,$n]}}"
  printf '%-10s %8sKi %8sKi %8sKi %8sKi %+7sKi   %6s %6s %6s\n' "$n" "${rss[start,$n]}" \
    "${rss[warm,$n]}" "${rss[mid,$n]}" "${rss[end,$n]}" "$((rss[end,$n] - rss[mid,$n]))" \
    "${fd[start,$n]}" "${fd[warm,$n]}" "${fd[end,$n]}"
  if ! kill -0 "${pid[$n]}" 2> /dev/null; then
    echo "FAIL: $n (pid ${pid[$n]}) is not running"
    status=1
  elif [ $((fd[end,$n] - fd[warm,$n])) -gt "$fd_slack" ]; then
    echo "FAIL: $n has $((fd[end,$n] - fd[warm,$n])) more open fds than after warm-up (slack $fd_slack)"
    status=1
  fi
done
echo "router cache_aware tree tokens: warm ${tree[warm]}, half ${tree[mid]:-${tree[warm]}}," \
  "end ${tree[end]}"
echo "KV blocks free/total: prefill $blocks_start_prefill -> $blocks_end_prefill," \
  "decode $blocks_start_decode -> $blocks_end_decode"
for b in "$blocks_end_prefill" "$blocks_end_decode"; do
  if ! all_free "$b"; then
    echo "FAIL: KV blocks not all free at the end ($b)"
    status=1
  fi
done
if [ "$status" = 0 ]; then echo "PASS"; fi
exit "$status"
