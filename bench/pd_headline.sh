#!/usr/bin/env bash
# The headline benchmark: prefill-decode disaggregation against colocated workers on the same
# mixed workload and the same total compute threads, at several Poisson request rates.
#
#   bench/pd_headline.sh [--plot FILE.png] [--out FILE.json] [BIN_DIR]   # BIN_DIR: build/bin
#   bench/pd_headline.sh --plot /tmp/pd.png     # the run BENCHMARKS.md records: ~25 minutes
#   FULL=1 bench/pd_headline.sh                 # the full shape: 2,048/64 and 128-256/256
#   SMOKE=1 bench/pd_headline.sh                # shipped tiny model, short lengths, < 1 minute
#   CONDITIONAL_ROUTER_FLAGS="--pd-local-prefill-max-tokens 256" bench/pd_headline.sh
#
# Configurations, each a fresh cluster on 127.0.0.1 per rate (so no run inherits another's
# queue or cache), run one after the other at each rate so host noise falls on both alike:
#   pd           1 tandem-prefill + 1 tandem-decode, THREADS each, router --pd-disaggregation;
#   colocated    2 tandem-decode --local-prefill, THREADS each, router --worker-urls (plain mode);
#   conditional  only when CONDITIONAL_ROUTER_FLAGS is set: the pd cluster with
#                CONDITIONAL_DECODE_FLAGS (default none: a decode worker prefills the legs sent
#                without a prefill worker unless --allow-local-prefill=false) on the decode worker and
#                CONDITIONAL_ROUTER_FLAGS on the router (conditional disaggregation: short prompts
#                prefilled where they decode, long ones on the prefill worker).
# Workload: by default 20% long prompts (1,024 in, 16 out) and 80% short (64-128 in, 64 out) at
# 0.05-0.2 req/s, 150 s of arrivals per rate: on 2 shared cores, 1 thread per worker, the
# synthetic Qwen2.5-0.5B shape, the 8 runs took 24 minutes. FULL=1 is the shape the benchmark
# is meant for (2,048 in / 64 out and 128-256 in / 256 out, TTFT SLO 60 s); at 1 thread per
# worker it needs far longer runs or a faster host (BENCHMARKS.md says why).
# Every run: tandem-bench --dataset-name mixed (bench/tandem_bench/mixed_dataset.h), ids sent as
# input_ids (--tokenize-prompt, exact lengths), ignore_eos, every token timed whether or not it
# decodes to text (--time-tokens-without-text: the synthetic model's ids mostly lie beyond the
# shipped tokenizer's vocabulary), seed SEED, the same prompts and
# arrival times for every configuration at a rate. Per run: NUM_PROMPTS prompts, or by default
# max(MIN_PROMPTS, rate x DURATION_S); a run taking longer than RUN_TIMEOUT_S is stopped and
# reported as failed.
#
# Knobs (environment): MODEL_PATH (default: the synthetic Qwen2.5-0.5B shape at
# /tmp/tandem-qwen2.5-0.5b, made with tools/make_synthetic_model when absent), RATES, DURATION_S,
# NUM_PROMPTS, MIN_PROMPTS, LONG_FRACTION, LONG_IN, LONG_OUT, SHORT_IN_MIN, SHORT_IN_MAX,
# SHORT_OUT, THREADS (per worker), KV_CACHE (per worker), WORKER_FLAGS (extra flags for every
# worker), SLO_TTFT_MS, SLO_ITL_P99_MS (goodput: a request is good when its TTFT and its own ITL
# p99 are within them), SEED, RUN_TIMEOUT_S, KEEP_LOGS=1 (keep the cluster logs).
#
# Output: one tandem-bench table per run, then a summary table (throughput, TTFT p50/p99, ITL
# p50/p99/max, goodput, and pd/colocated ratios per rate); --out writes all of it as one JSON
# (bench/pd_headline_report.py: the format), --plot a PNG of throughput, TTFT p99, ITL p99 and
# goodput against the rate (gnuplot). Every daemon started is stopped on exit (also on failure
# or Ctrl-C).
set -euo pipefail
cd "$(dirname "$0")/.."

plot="" out=""
while [ $# -gt 0 ]; do
  case $1 in
    --plot) plot=$2; shift 2 ;;
    --out) out=$2; shift 2 ;;
    -h|--help) sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
    -*) echo "pd_headline: unknown option $1" >&2; exit 2 ;;
    *) break ;;
  esac
done
bin=${1:-build/bin}

if [ "${SMOKE:-0}" = 1 ]; then
  # The shipped model (512 positions): the same shape of workload, scaled down.
  : "${MODEL_PATH:=models/tandem-tiny-english}" "${RATES:=4 8}" "${NUM_PROMPTS:=12}"
  : "${LONG_IN:=384}" "${LONG_OUT:=8}" "${SHORT_IN_MIN:=16}" "${SHORT_IN_MAX:=32}"
  : "${SHORT_OUT:=32}" "${KV_CACHE:=64MiB}" "${SLO_TTFT_MS:=2000}" "${SLO_ITL_P99_MS:=200}"
  : "${RUN_TIMEOUT_S:=60}"
fi
if [ "${FULL:-0}" = 1 ]; then
  : "${LONG_IN:=2048}" "${LONG_OUT:=64}" "${SHORT_IN_MIN:=128}" "${SHORT_IN_MAX:=256}"
  : "${SHORT_OUT:=256}" "${SLO_TTFT_MS:=60000}" "${RATES:=0.02 0.04 0.06}" "${DURATION_S:=600}"
  : "${RUN_TIMEOUT_S:=1800}"
fi
model=${MODEL_PATH:-/tmp/tandem-qwen2.5-0.5b}
rates=${RATES:-0.05 0.1 0.15 0.2}
duration_s=${DURATION_S:-150}
min_prompts=${MIN_PROMPTS:-10}
long_fraction=${LONG_FRACTION:-0.2}
long_in=${LONG_IN:-1024}
long_out=${LONG_OUT:-16}
short_in_min=${SHORT_IN_MIN:-64}
short_in_max=${SHORT_IN_MAX:-128}
short_out=${SHORT_OUT:-64}
threads=${THREADS:-1}
kv_cache=${KV_CACHE:-512MiB}
read -r -a worker_flags <<< "${WORKER_FLAGS:-}"
slo_ttft_ms=${SLO_TTFT_MS:-15000}
slo_itl_p99_ms=${SLO_ITL_P99_MS:-1000}
seed=${SEED:-1}
run_timeout_s=${RUN_TIMEOUT_S:-420}
read -r -a conditional_router_flags <<< "${CONDITIONAL_ROUTER_FLAGS:-}"
read -r -a conditional_decode_flags <<< "${CONDITIONAL_DECODE_FLAGS:-}"
configs=(pd colocated)
[ ${#conditional_router_flags[@]} -gt 0 ] && configs+=(conditional)

for b in tandem-router tandem-prefill tandem-decode tandem-bench; do
  if [ ! -x "$bin/$b" ]; then
    echo "pd_headline: $bin/$b was not built" >&2
    exit 2
  fi
done
if [ ! -f "$model/config.json" ] && [ -z "${MODEL_PATH:-}" ]; then
  echo "pd_headline: making the synthetic Qwen2.5-0.5B shape at $model (~1 GB)"
  tools/make_synthetic_model --out "$model" --preset qwen2.5-0.5b
fi
if [ ! -f "$model/tokenizer.json" ]; then
  echo "pd_headline: no model at $model (set MODEL_PATH)" >&2
  exit 2
fi

work=$(mktemp -d /tmp/pd_headline.XXXXXX)
pids=()
stop_all() {
  for pid in "${pids[@]}"; do kill "$pid" 2>/dev/null || true; done
  for pid in "${pids[@]}"; do
    for _ in $(seq 1 50); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
    kill -9 "$pid" 2>/dev/null || true
    wait "$pid" 2>/dev/null || true
  done
  pids=()
}
cleanup() {
  stop_all
  if [ "${KEEP_LOGS:-0}" = 1 ]; then echo "pd_headline: logs kept in $work"; else rm -rf "$work"; fi
}
trap cleanup EXIT
trap 'exit 130' INT TERM

free_port() {
  python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'
}

# start_cluster CONFIG LOGDIR -> sets router_port; every daemon's pid goes to pids.
start_cluster() {
  local config=$1 log=$2
  mkdir -p "$log"
  local secret="$log/secret"
  (umask 077; head -c 24 /dev/urandom | base64 > "$secret")
  local common=(--model-path "$model" --kv-cache-memory "$kv_cache" --threads "$threads"
                "${worker_flags[@]}")
  local router_args=() port http boot i
  if [ "$config" = colocated ]; then
    router_args=(--worker-urls)
    for i in 0 1; do
      port=$(free_port); http=$(free_port)
      "$bin/tandem-decode" "${common[@]}" --local-prefill --port "$port" --http-port "$http" \
        > "$log/colocated$i.log" 2>&1 &
      pids+=($!)
      router_args+=("http://127.0.0.1:$port")
    done
  else
    local decode_extra=()
    [ "$config" = conditional ] && decode_extra=("${conditional_decode_flags[@]}")
    port=$(free_port); http=$(free_port); boot=$(free_port)
    "$bin/tandem-prefill" "${common[@]}" --port "$port" --http-port "$http" \
      --disaggregation-bootstrap-port "$boot" --cluster-secret-file "$secret" \
      > "$log/prefill.log" 2>&1 &
    pids+=($!)
    router_args=(--pd-disaggregation --prefill "http://127.0.0.1:$port" "$boot")
    port=$(free_port); http=$(free_port)
    "$bin/tandem-decode" "${common[@]}" "${decode_extra[@]}" --port "$port" --http-port "$http" \
      --cluster-secret-file "$secret" > "$log/decode.log" 2>&1 &
    pids+=($!)
    router_args+=(--decode "http://127.0.0.1:$port" --cluster-secret-file "$secret")
    [ "$config" = conditional ] && router_args+=("${conditional_router_flags[@]}")
  fi
  router_port=$(free_port)
  "$bin/tandem-router" --model-path "$model" --host 127.0.0.1 --port "$router_port" \
    "${router_args[@]}" --health-check-interval-secs 1 --health-success-threshold 1 \
    > "$log/router.log" 2>&1 &
  pids+=($!)
  local pid
  for _ in $(seq 1 600); do
    for pid in "${pids[@]}"; do
      if ! kill -0 "$pid" 2>/dev/null; then
        echo "pd_headline: a daemon exited during start-up ($config):" >&2
        tail -n 5 "$log"/*.log >&2
        exit 1
      fi
    done
    if curl -sf "http://127.0.0.1:$router_port/readiness" > /dev/null; then return 0; fi
    sleep 0.2
  done
  echo "pd_headline: the router was not ready after 120 s ($config); see $log" >&2
  tail -n 5 "$log"/*.log >&2
  exit 1
}

uptime_before=$(uptime)
echo "host: $(nproc) cores, $(grep -m1 'model name' /proc/cpuinfo | sed 's/.*: //'); $uptime_before"
echo "model: $model; $threads thread(s) per worker, 2 workers in every configuration"
echo "workload: $(awk -v f="$long_fraction" 'BEGIN { printf "%g%%", 100 * f }') long ($long_in in," \
  "$long_out out), the rest short ($short_in_min-$short_in_max in, $short_out out);" \
  "SLO TTFT <= $slo_ttft_ms ms, ITL p99 <= $slo_itl_p99_ms ms"
: > "$work/runs.jsonl"
for rate in $rates; do
  n=${NUM_PROMPTS:-$(awk -v r="$rate" -v d="$duration_s" -v m="$min_prompts" \
    'BEGIN { n = int(r * d + 0.5); print (n < m ? m : n) }')}
  for config in "${configs[@]}"; do
    echo "=== $config, rate $rate req/s, $n prompts"
    start_cluster "$config" "$work/$config-$rate"
    status=0
    timeout "$run_timeout_s" "$bin/tandem-bench" --backend sglang --port "$router_port" \
      --model "$model" --dataset-name mixed --tokenize-prompt --num-prompts "$n" \
      --mixed-long-fraction "$long_fraction" --mixed-long-input-len "$long_in" \
      --mixed-long-output-len "$long_out" --mixed-short-input-min "$short_in_min" \
      --mixed-short-input-max "$short_in_max" --mixed-short-output-len "$short_out" \
      --request-rate "$rate" --seed "$seed" --warmup-requests 1 --disable-tqdm \
      --time-tokens-without-text \
      --goodput-ttft-ms "$slo_ttft_ms" --goodput-itl-p99-ms "$slo_itl_p99_ms" \
      --output-file "$work/runs.jsonl" --tag "$config" || status=$?
    stop_all
    if [ "$status" != 0 ]; then
      echo "pd_headline: $config at rate $rate failed (status $status; 124: over" \
        "RUN_TIMEOUT_S=$run_timeout_s s)" >&2
      echo "{\"tag\": \"$config\", \"request_rate\": $rate, \"run_failed\": $status}" \
        >> "$work/runs.jsonl"
    fi
  done
done

report_args=(--runs "$work/runs.jsonl" --host-cpu "$(grep -m1 'model name' /proc/cpuinfo | sed 's/.*: //')"
             --cores "$(nproc)" --uptime-before "$uptime_before" --uptime-after "$(uptime)"
             --model "$model" --threads-per-worker "$threads")
[ -n "$out" ] && report_args+=(--out "$out")
[ -n "$plot" ] && report_args+=(--plot "$plot")
python3 bench/pd_headline_report.py "${report_args[@]}"
