#!/usr/bin/env bash
# The router's cache_aware prefill policy, on its prefix tree and on the workers' KV events
# (--kv-events), against round_robin on a shared-prefix workload, measured from the prefill
# workers' own radix-cache counters.
#
#   bench/cache_aware_hit_rate.sh [BIN_DIR]        # BIN_DIR defaults to build/bin
#   GROUPS_N=8 PER_GROUP=8 PREFIX_LEN=256 SUFFIX_LEN=32 CLIENTS=4 bench/cache_aware_hit_rate.sh
#   GROUPS_N=16 PER_GROUP=8 PREFIX_LEN=1024 bench/cache_aware_hit_rate.sh
#   MODE=plain KV_MEMORY=3MiB GROUPS_N=16 PER_GROUP=8 PREFIX_LEN=1024 bench/cache_aware_hit_rate.sh
#   (the shipped model has 512 positions: for longer prompts, unless MODEL_PATH is set, a small
#   synthetic model with 4,096 positions, tools/make_synthetic_model --preset qwen3-tiny, is made
#   in the run's temporary directory and removed with it)
#
# For each policy, a fresh cluster on 127.0.0.1: 2 tandem-prefill + 2 tandem-decode workers on
# the shipped model and tandem-router in PD mode with --prefill-policy <policy> (decode policy
# round_robin); with MODE=plain, 2 colocated workers (tandem-decode --local-prefill) and the
# router in plain mode with --policy <policy>. GROUPS_N x PER_GROUP prompts (token ids via /generate input_ids), the prompts of
# a group sharing a PREFIX_LEN-token prefix followed by SUFFIX_LEN tokens of their own, are sent
# by CLIENTS concurrent clients in one shuffled order, the same for both policies. The hit rate is the sum over
# both prefill workers of tandem_engine_cached_prompt_tokens_total over
# tandem_engine_prompt_tokens_total; the mean TTFT is the router's tandem_router_ttft_seconds;
# "predicted / reused" is the router's tandem_router_cache_aware_matched_tokens_total (what it
# expected the chosen worker to reuse) over the tokens the workers reused, summed over the run
# (1.000 when every prediction was exact in total). "agree" is per request: the share of requests
# whose cached tokens predicted by cache_aware when it routed them (its debug log line) equal the
# cached_tokens the response reports (meta_info): in PD mode what the prefill worker reused (the
# decode worker reports its CompletionNotice's count), in plain mode the colocated worker's. Prints
# every rate and cache_aware / round_robin.
# Every daemon started is stopped on exit (also on failure or Ctrl-C).
set -euo pipefail
cd "$(dirname "$0")/.."

bin=${1:-build/bin}
model=${MODEL_PATH:-models/tandem-tiny-english}
groups_n=${GROUPS_N:-8}
per_group=${PER_GROUP:-8}
prefix_len=${PREFIX_LEN:-256}
suffix_len=${SUFFIX_LEN:-32}
clients=${CLIENTS:-4}
mode=${MODE:-pd}
kv_memory=${KV_MEMORY:-64MiB}  # per worker; small enough and the radix caches evict
for b in tandem-router tandem-prefill tandem-decode; do
  if [ ! -x "$bin/$b" ]; then
    echo "cache_aware_hit_rate: $bin/$b was not built" >&2
    exit 2
  fi
done

work=$(mktemp -d /tmp/cache_aware_hit_rate.XXXXXX)
pids=()
stop_all() {
  for pid in "${pids[@]}"; do kill "$pid" 2>/dev/null || true; done
  for pid in "${pids[@]}"; do
    for _ in $(seq 1 30); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
    kill -9 "$pid" 2>/dev/null || true
    wait "$pid" 2>/dev/null || true
  done
  pids=()
}
trap 'stop_all; rm -rf "$work"' EXIT
trap 'exit 130' INT TERM

# Prompts (and 4 new tokens) past the shipped model's 512 positions: a small synthetic model.
if [ -z "${MODEL_PATH:-}" ] && [ $((prefix_len + suffix_len + 4)) -gt 512 ]; then
  model="$work/model"
  echo "prompts of $((prefix_len + suffix_len)) tokens: a synthetic qwen3-tiny model with 4,096 positions at $model"
  /usr/bin/python3 tools/make_synthetic_model --out "$model" --preset qwen3-tiny --seed 1 \
    > "$work/make_model.log" 2>&1 || { cat "$work/make_model.log" >&2; exit 1; }
fi
if [ ! -f "$model/tokenizer.json" ]; then
  echo "cache_aware_hit_rate: no model at $model (set MODEL_PATH)" >&2
  exit 2
fi

free_port() {
  python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'
}

# The request bodies, one file each, and the send order: a shuffle with a fixed seed, the same for
# both policies (a fixed group-by-group order would let round_robin keep each group on one
# worker by accident of parity).
mkdir -p "$work/bodies"
awk -v G="$groups_n" -v P="$per_group" -v L="$prefix_len" -v S="$suffix_len" -v dir="$work/bodies" '
BEGIN {
  srand(7)
  n = 0
  for (r = 0; r < P; r++) for (g = 0; g < G; g++) {
    ids = ""
    for (i = 0; i < L; i++) ids = ids (i ? "," : "") (100 + (g * 7919 + i * 104729) % 2900)
    for (i = 0; i < S; i++) ids = ids "," (100 + (g * 31 + r * 977 + i * 613 + 17) % 2900)
    file = sprintf("%s/%04d.json", dir, n++)
    printf "{\"input_ids\":[%s],\"sampling_params\":{\"max_new_tokens\":4,\"temperature\":0},\"stream\":false}\n", ids > file
    close(file)
    print rand(), file > (dir "/../order.unsorted")
  }
}'
sort -n "$work/order.unsorted" | awk '{ print $2 }' > "$work/order"
total=$((groups_n * per_group))

metric() {  # metric PORT NAME -> the value (0 when absent)
  curl -sf "http://127.0.0.1:$1/metrics" | awk -v n="$2" '$1 == n { v = $2 } END { print v + 0 }'
}

# agreement LOG_DIR -> "agreeing requests" (cache_aware's predicted cached tokens per prompt,
# from the router's debug log, against the cached_tokens of its response; prompts are told apart
# by their first and last 8 token ids), "- -" for a policy that predicts nothing.
agreement() {
  /usr/bin/python3 - "$1" "$work/bodies" <<'PY'
import json, os, re, sys
log_dir, bodies = sys.argv[1], sys.argv[2]
predicted = {}
line_re = re.compile(r"cache_aware: prompt_tokens=\d+ head=([\d,]+) tail=([\d,]+) worker=\S+ "
                     r"source=\w+ predicted=(\d+)")
with open(os.path.join(log_dir, "router.log"), errors="replace") as f:
    for line in f:
        m = line_re.search(line)
        if m:  # a request retried on another worker: its last decision counts
            predicted[(m.group(1), m.group(2))] = int(m.group(3))
if not predicted:
    print("- -")
    sys.exit(0)
agree = total = 0
for name in sorted(os.listdir(bodies)):
    ids = json.load(open(os.path.join(bodies, name)))["input_ids"]
    resp = json.load(open(os.path.join(log_dir, "resp", name)))
    total += 1
    key = (",".join(map(str, ids[:8])), ",".join(map(str, ids[-8:])))
    agree += predicted.get(key) == resp["meta_info"]["cached_tokens"]
print(agree, total)
PY
}

# run_policy NAME POLICY [ROUTER FLAGS...] -> writes "hit query ttft_mean predicted agree n"
# (hit and query summed over the prefill workers) to $work/NAME.result
run_policy() {
  local name=$1 policy=$2 log="$work/$1"
  shift 2
  local extra=("$@")
  mkdir -p "$log"
  local secret="$log/secret"
  (umask 077; head -c 24 /dev/urandom | base64 > "$secret")
  local prefill_args=() decode_args=() http_ports=() router_args=()
  for i in 0 1; do
    local port http boot
    if [ "$mode" = plain ]; then
      port=$(free_port); http=$(free_port)
      "$bin/tandem-decode" --local-prefill --model-path "$model" --port "$port" \
        --http-port "$http" --kv-cache-memory "$kv_memory" --threads 1 \
        --cluster-secret-file "$secret" > "$log/colocated$i.log" 2>&1 &
      pids+=($!)
      router_args+=("http://127.0.0.1:$port")
      http_ports+=("$http")
      continue
    fi
    port=$(free_port); http=$(free_port); boot=$(free_port)
    "$bin/tandem-prefill" --model-path "$model" --port "$port" --http-port "$http" \
      --disaggregation-bootstrap-port "$boot" --kv-cache-memory "$kv_memory" --threads 1 \
      --cluster-secret-file "$secret" > "$log/prefill$i.log" 2>&1 &
    pids+=($!)
    prefill_args+=(--prefill "http://127.0.0.1:$port" "$boot")
    http_ports+=("$http")
    port=$(free_port); http=$(free_port)
    "$bin/tandem-decode" --model-path "$model" --port "$port" --http-port "$http" \
      --kv-cache-memory 64MiB --threads 1 --cluster-secret-file "$secret" \
      > "$log/decode$i.log" 2>&1 &
    pids+=($!)
    decode_args+=(--decode "http://127.0.0.1:$port")
  done
  if [ "$mode" = plain ]; then
    router_args=(--worker-urls "${router_args[@]}" --policy "$policy")
  else
    router_args=(--pd-disaggregation "${prefill_args[@]}" "${decode_args[@]}"
                 --prefill-policy "$policy" --decode-policy round_robin)
  fi
  local router_port
  router_port=$(free_port)
  "$bin/tandem-router" --model-path "$model" --host 127.0.0.1 --port "$router_port" \
    "${router_args[@]}" --cluster-secret-file "$secret" "${extra[@]}" --log-level debug \
    --health-check-interval-secs 1 --health-success-threshold 1 > "$log/router.log" 2>&1 &
  pids+=($!)
  local ready=0
  for _ in $(seq 1 300); do
    for pid in "${pids[@]}"; do
      if ! kill -0 "$pid" 2>/dev/null; then
        echo "cache_aware_hit_rate: a daemon exited during start-up:" >&2
        tail -n 5 "$log"/*.log >&2
        exit 1
      fi
    done
    if curl -sf "http://127.0.0.1:$router_port/readiness" > /dev/null; then ready=1; break; fi
    sleep 0.2
  done
  if [ "$ready" != 1 ]; then
    echo "cache_aware_hit_rate: the router was not ready after 60 s; see $log" >&2
    tail -n 5 "$log"/*.log >&2
    exit 1
  fi
  # Every request must succeed: a failed one would skew the counters.
  local codes
  mkdir -p "$log/resp"
  codes=$(xargs < "$work/order" -P "$clients" -I{} sh -c 'curl -s -o "$1/resp/${0##*/}" \
    -w "%{http_code}\n" -H "Content-Type: application/json" --max-time 120 \
    --data-binary @"$0" "$2"' {} "$log" "http://127.0.0.1:$router_port/generate" |
    sort | uniq -c || true)
  if [ "$(echo "$codes" | awk '$2 == 200 { print $1 }')" != "$total" ]; then
    echo "cache_aware_hit_rate: $name: not every request succeeded (count status):" >&2
    echo "$codes" >&2
    tail -n 5 "$log"/*.log >&2
    exit 1
  fi
  sleep 1  # the engines publish their counters after each scheduler step
  local hit=0 query=0 h q
  for http in "${http_ports[@]}"; do
    h=$(metric "$http" tandem_engine_cached_prompt_tokens_total)
    q=$(metric "$http" tandem_engine_prompt_tokens_total)
    echo "  $name prefill :$http: $h of $q prompt tokens from the radix cache"
    hit=$(awk -v a="$hit" -v b="$h" 'BEGIN { print a + b }')
    query=$(awk -v a="$query" -v b="$q" 'BEGIN { print a + b }')
  done
  local ttft_sum ttft_count predicted
  ttft_sum=$(metric "$router_port" tandem_router_ttft_seconds_sum)
  ttft_count=$(metric "$router_port" tandem_router_ttft_seconds_count)
  predicted=$(metric "$router_port" tandem_router_cache_aware_matched_tokens_total)
  stop_all
  local agree
  agree=$(agreement "$log")
  awk -v h="$hit" -v q="$query" -v s="$ttft_sum" -v c="$ttft_count" -v p="$predicted" \
    -v a="$agree" 'BEGIN { print h, q, (c > 0 ? s / c : 0), p, a }' > "$work/$name.result"
}

echo "workload: $groups_n groups x $per_group prompts, $prefix_len shared + $suffix_len own tokens, $clients clients, $mode mode, $kv_memory KV per worker"
run_policy cache_aware_tree cache_aware
run_policy cache_aware_events cache_aware --kv-events --kv-events-poll-ms 10
run_policy round_robin round_robin
awk -v best="$(( (per_group - 1) * prefix_len * groups_n ))" \
    -v all="$(( total * (prefix_len + suffix_len) ))" '
FNR == 1 { name[++n] = FILENAME; sub(/.*\//, "", name[n]); sub(/\.result$/, "", name[n])
           hit[n] = $1; query[n] = $2; ttft[n] = $3; pred[n] = $4; ag[n] = $5; agn[n] = $6 }
END {
  printf "%-20s %12s %12s %9s %14s %17s %16s\n", "policy", "hit tokens", "prompt tok",
         "hit rate", "mean TTFT ms", "predicted/reused", "agree/requests"
  for (i = 1; i <= n; i++) {
    rate[name[i]] = query[i] > 0 ? hit[i] / query[i] : 0
    ratio = name[i] == "round_robin" ? "-" : (hit[i] > 0 ? sprintf("%.3f", pred[i] / hit[i]) : "-")
    per = ag[i] == "-" ? "-" : sprintf("%d/%d %.3f", ag[i], agn[i], agn[i] > 0 ? ag[i] / agn[i] : 0)
    printf "%-20s %12d %12d %9.3f %14.1f %17s %16s\n", name[i], hit[i], query[i], rate[name[i]],
           1000 * ttft[i], ratio, per
  }
  printf "ideal (one worker per group): %.3f\n", best / all
  rr = rate["round_robin"]
  for (k in rate) if (k != "round_robin") {
    if (rr > 0) printf "%s_vs_round_robin_hit_rate %.3f\n", k, rate[k] / rr
    else printf "%s_vs_round_robin_hit_rate inf (round_robin hit nothing)\n", k
  }
}' "$work/cache_aware_tree.result" "$work/cache_aware_events.result" "$work/round_robin.result"
