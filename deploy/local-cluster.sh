#!/usr/bin/env bash
# local-cluster.sh: N tandem-prefill and M tandem-decode workers and a
# `tandem-router --pd-disaggregation` in front of them, all on 127.0.0.1, with logs and pid files
# under a run directory.
#
#   deploy/local-cluster.sh start  [--prefill N] [--decode M] [--model DIR] [--run-dir DIR]
#                                  [--base-port P] [--wait-secs S]
#   deploy/local-cluster.sh status [--run-dir DIR]
#   deploy/local-cluster.sh stop   [--run-dir DIR] [--stop-timeout S]
#
# Ports: the router listens on P (default 30000); worker k (prefill workers first, k = 1, 2, ...)
# uses P+3k for gRPC, P+3k+1 for HTTP (/health, /metrics) and, for a prefill worker, P+3k+2 for
# its bootstrap server. All processes share one cluster secret, generated into the run directory
# (mode 0600) on first start; the router's admin key is generated beside it (admin-key, 0600,
# passed as --admin-key-file; tandemctl --run-dir DIR reads it).
#
# Environment: TANDEM_BIN (binaries, default build/bin), TANDEM_ADMIN_KEY (the admin key to use
# instead of a generated one; written to the admin-key file), TANDEM_API_KEY (passed to the
# router as --api-key, and read by tandemctl), TANDEM_KV_CACHE_MEMORY (per
# worker, default 256MiB), TANDEM_WORKER_THREADS (default 1), TANDEM_PREFILL_ARGS,
# TANDEM_DECODE_ARGS, TANDEM_ROUTER_ARGS (extra flags, split on spaces).
#
# Exit codes: 0 ok; 1 a start that failed (what was started is stopped again) or, for status, a
# process that is not running; 2 usage errors, a cluster already running, a missing binary or model.
set -euo pipefail

repo=$(cd "$(dirname "$0")/.." && pwd)
prog=$(basename "$0")

usage() {
  sed -n '2,23p' "$0" | sed 's/^# \{0,1\}//'
  exit 2
}
die() {
  echo "$prog: $1" >&2
  exit "${2:-1}"
}

[ $# -ge 1 ] || usage
command=$1
shift
case "$command" in
  start | stop | status) ;;
  -h | --help | help) usage ;;
  *) echo "$prog: unknown command '$command' (start, stop or status)" >&2; exit 2 ;;
esac

n_prefill=1
n_decode=1
model=""
run_dir="$repo/run/local-cluster"
base_port=30000
wait_secs=180
stop_timeout=20
while [ $# -gt 0 ]; do
  [ $# -ge 2 ] || die "$1 needs a value" 2
  case "$1" in
    --prefill) n_prefill=$2 ;;
    --decode) n_decode=$2 ;;
    --model) model=$2 ;;
    --run-dir) run_dir=$2 ;;
    --base-port) base_port=$2 ;;
    --wait-secs) wait_secs=$2 ;;
    --stop-timeout) stop_timeout=$2 ;;
    *) die "unknown option '$1'" 2 ;;
  esac
  shift 2
done
for v in n_prefill n_decode base_port wait_secs stop_timeout; do
  [[ ${!v} =~ ^[0-9]+$ ]] || die "--${v#n_} must be a non-negative integer, not '${!v}'" 2
done
bin=${TANDEM_BIN:-$repo/build/bin}
tandemctl="$bin/tandemctl"
router_url="http://127.0.0.1:$base_port"

# shellcheck source=deploy/lib/pidfiles.sh
source "$repo/deploy/lib/pidfiles.sh"

pid_files() {
  [ -d "$run_dir" ] || return 0
  find "$run_dir" -maxdepth 1 -name '*.pid' | sort
}

stop_all() {
  local files f
  files=$(pid_files)
  [ -n "$files" ] || { echo "$prog: nothing to stop in $run_dir"; return 0; }
  local ordered=()
  [ -e "$run_dir/router.pid" ] && ordered+=("$run_dir/router.pid")
  for f in $files; do [ "$f" = "$run_dir/router.pid" ] || ordered+=("$f"); done
  stop_pid_files "$stop_timeout" "${ordered[@]}"
  echo "$prog: stopped (logs kept in $run_dir)"
}

status() {
  local files f pid all=0
  files=$(pid_files)
  if [ -z "$files" ]; then
    echo "$prog: no cluster in $run_dir"
    return 1
  fi
  printf '%-12s %-8s %s\n' PROCESS PID STATE
  for f in $files; do
    local name
    name=$(basename "$f" .pid)
    if pid=$(live_pid "$f"); then
      printf '%-12s %-8s %s\n' "$name" "$pid" alive
    else
      read -r pid _ < "$f" || true
      printf '%-12s %-8s %s\n' "$name" "${pid:--}" "not running (see $run_dir/$name.log)"
      all=1
    fi
  done
  if [ -s "$run_dir/router.url" ] && [ -x "$tandemctl" ]; then
    echo
    "$tandemctl" --router "$(cat "$run_dir/router.url")" --run-dir "$run_dir" workers list || all=1
  fi
  return "$all"
}

if [ "$command" = stop ]; then
  stop_all
  exit 0
fi
if [ "$command" = status ]; then
  status
  exit $?
fi

# ---- start ----
[ "$n_prefill" -ge 1 ] || die "--prefill must be at least 1 (the router runs with --pd-disaggregation)" 2
[ "$n_decode" -ge 1 ] || die "--decode must be at least 1" 2
last_port=$((base_port + 3 * (n_prefill + n_decode) + 2))
if [ "$base_port" -lt 1 ] || [ "$last_port" -gt 65535 ]; then
  die "--base-port $base_port leaves no room for $((n_prefill + n_decode)) workers (ports up to $last_port)" 2
fi
for b in tandem-router tandem-prefill tandem-decode; do
  [ -x "$bin/$b" ] || die "$bin/$b is missing (build it, or point TANDEM_BIN at the binaries)" 2
done
if [ -z "$model" ]; then
  model=$(find "$repo/models" -mindepth 2 -maxdepth 2 -name config.json 2> /dev/null |
    sort | head -n 1 || true)
  model=${model%/config.json}
fi
if [ -z "$model" ] || [ ! -f "$model/config.json" ]; then
  die "no model: --model DIR must be a model directory with config.json (got '${model:-nothing}')" 2
fi

mkdir -p "$run_dir"
for f in $(pid_files); do
  if pid=$(live_pid "$f"); then
    die "a cluster is already running in $run_dir ($(basename "$f" .pid) is pid $pid); stop it first" 2
  fi
  rm -f "$f"
done
for port in $(seq "$base_port" "$last_port"); do
  if (exec 3<> "/dev/tcp/127.0.0.1/$port") 2> /dev/null; then
    die "port $port on 127.0.0.1 is in use; choose another --base-port" 2
  fi
done

secret="$run_dir/cluster-secret"
if [ ! -s "$secret" ]; then
  (umask 077 && head -c 32 /dev/urandom | base64 > "$secret")
fi
chmod 600 "$secret"
# The admin API is closed without a key; the key lives in a file so that `ps` does not show it.
admin_key="$run_dir/admin-key"
if [ -n "${TANDEM_ADMIN_KEY:-}" ]; then
  (umask 077 && printf '%s\n' "$TANDEM_ADMIN_KEY" > "$admin_key")
elif [ ! -s "$admin_key" ]; then
  (umask 077 && head -c 32 /dev/urandom | base64 > "$admin_key")
fi
chmod 600 "$admin_key"

# start NAME BINARY ARGS...: runs detached, output to NAME.log, "pid binary" in NAME.pid.
start_process() {
  local name=$1 binary=$2
  shift 2
  setsid "$binary" "$@" > "$run_dir/$name.log" 2>&1 < /dev/null &
  echo "$! $(basename "$binary")" > "$run_dir/$name.pid"
}

on_failure() {
  echo "$prog: start failed; stopping what was started (logs in $run_dir)" >&2
  stop_all > /dev/null
  exit 1
}

kv=${TANDEM_KV_CACHE_MEMORY:-256MiB}
threads=${TANDEM_WORKER_THREADS:-1}
router_args=(--pd-disaggregation --model-path "$model" --host 127.0.0.1 --port "$base_port"
  --cluster-secret-file "$secret" --admin-key-file "$admin_key" --health-check-interval-secs 2
  --health-success-threshold 1)
k=0
for i in $(seq 1 "$n_prefill"); do
  k=$((k + 1))
  port=$((base_port + 3 * k))
  # shellcheck disable=SC2086
  start_process "prefill-$i" "$bin/tandem-prefill" --model-path "$model" --host 127.0.0.1 \
    --port "$port" --http-port $((port + 1)) --disaggregation-bootstrap-port $((port + 2)) \
    --kv-cache-memory "$kv" --threads "$threads" --cluster-secret-file "$secret" \
    ${TANDEM_PREFILL_ARGS:-}
  router_args+=(--prefill "http://127.0.0.1:$port" $((port + 2)))
done
for i in $(seq 1 "$n_decode"); do
  k=$((k + 1))
  port=$((base_port + 3 * k))
  # shellcheck disable=SC2086
  start_process "decode-$i" "$bin/tandem-decode" --model-path "$model" --host 127.0.0.1 \
    --port "$port" --http-port $((port + 1)) --kv-cache-memory "$kv" --threads "$threads" \
    --cluster-secret-file "$secret" ${TANDEM_DECODE_ARGS:-}
  router_args+=(--decode "http://127.0.0.1:$port")
done
[ -z "${TANDEM_API_KEY:-}" ] || router_args+=(--api-key "$TANDEM_API_KEY")
# shellcheck disable=SC2086
start_process router "$bin/tandem-router" "${router_args[@]}" ${TANDEM_ROUTER_ARGS:-}
echo "$router_url" > "$run_dir/router.url"

echo -n "$prog: waiting for $router_url/readiness"
ready=0
deadline=$((SECONDS + wait_secs))
while [ "$SECONDS" -lt "$deadline" ]; do
  for f in $(pid_files); do
    if ! live_pid "$f" > /dev/null; then
      echo
      echo "$prog: $(basename "$f" .pid) exited during start-up; the end of its log:" >&2
      tail -n 10 "$run_dir/$(basename "$f" .pid).log" >&2 || true
      on_failure
    fi
  done
  code=$(curl -s -o /dev/null -w '%{http_code}' --max-time 2 "$router_url/readiness" || true)
  if [ "$code" = 404 ]; then
    code=$(curl -s -o /dev/null -w '%{http_code}' --max-time 2 "$router_url/health" || true)
  fi
  if [ "$code" = 200 ]; then
    ready=1
    break
  fi
  echo -n "."
  sleep 0.5
done
echo
if [ "$ready" != 1 ]; then
  echo "$prog: the router was not ready after ${wait_secs}s" >&2
  on_failure
fi
echo "$prog: ready: router $router_url, $n_prefill prefill and $n_decode decode workers" \
  "(run dir $run_dir)"
echo "  $tandemctl --router $router_url --run-dir $run_dir workers list"
echo "  $0 stop --run-dir $run_dir"
