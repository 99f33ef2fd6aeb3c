#!/usr/bin/env bash
# fault_netns_test.sh BIN_DIR MODEL_DIR partition|netem: network faults between a prefill and a
# decode worker, each on its own network-namespace host (deploy/netns/hosts.sh), with the router
# on a third host.
#
#   h1 router ─┐                       h2 prefill, h3 decode: one bridge (hosts.sh) carries the
#   h2 prefill ├─ bridge (A.0/24)      router's gRPC legs and health checks; a direct veth pair
#   h3 decode ─┘                       pd0 (B.1 on h2, B.2 on h3) carries everything between the
#   h2 pd0 B.1 ══ B.2 pd0 h3           workers: the decode worker reaches the bootstrap server at
#                                      B.1 and the KV transfer endpoint listens on B.2. h1 reaches
#                                      the prefill worker's B.1 through the bridge (a host route).
# So faults on pd0 hit the prefill<->decode path only; the router still sees both workers.
#
# partition: requests run while pd0 goes down (and more are sent while it is down); each ends
#   with a success equal to the clean run's output or a clear 5xx naming the failure, before its
#   deadline. Then the link comes back and requests succeed again.
# netem: 50 ms delay and 5% loss on both ends of pd0 (tc netem; where the kernel has no netem, a
#   4 Mbit/s token bucket with a 16 KB queue, which delays bursts and drops what overflows); every
#   request still succeeds with exactly the clean link's greedy output.
# Both: afterwards both workers have every KV block free (their /metrics, after a cache flush
# through the router) and the router lists both as healthy. One "[fault-summary]" line is printed.
# Every namespace, veth and qdisc made here is removed on exit, failure included (they all live
# in the namespaces that `hosts.sh down` deletes).
#
# Exit codes: 0 pass, 1 fail, 77 skipped (namespaces cannot be made here; the reason is printed).
set -euo pipefail

bin=${1:?usage: fault_netns_test.sh BIN_DIR MODEL_DIR partition|netem}
model=${2:?usage: fault_netns_test.sh BIN_DIR MODEL_DIR partition|netem}
mode=${3:?usage: fault_netns_test.sh BIN_DIR MODEL_DIR partition|netem}
case "$mode" in partition | netem) ;; *) echo "unknown mode '$mode'" >&2 && exit 2 ;; esac
repo=$(cd "$(dirname "$0")/../.." && pwd)
hosts="$repo/deploy/netns/hosts.sh"

# shellcheck source=tests/netns/lib.sh
source "$repo/tests/netns/lib.sh"
netns_require "$bin" curl jq
if [ "$mode" = netem ]; then command -v tc > /dev/null || skip "'tc' (iproute2) is not installed"; fi
[ -f "$model/config.json" ] || fail "no model in $model"

id="flt${mode:0:1}$$"
a=10.$((RANDOM % 200 + 20)).$((RANDOM % 250)) # the bridge's /24
b=10.$((RANDOM % 200 + 20)).$((RANDOM % 250)) # the direct prefill<->decode link's /24
[ "$a" != "$b" ] || b=${b%.*}.$(((${b##*.} + 1) % 250))
ns_router="tandem-$id-h1"
ns_prefill="tandem-$id-h2"
ns_decode="tandem-$id-h3"
work=$(mktemp -d "${TMPDIR:-/tmp}/tandem-faults.XXXXXX")
logs="$work/*.log"
netns_setup "$a" 3
ip -n "$ns_prefill" link add pd0 type veth peer name pd0 netns "$ns_decode"
ip -n "$ns_prefill" addr add "$b.1/24" dev pd0
ip -n "$ns_decode" addr add "$b.2/24" dev pd0
ip -n "$ns_prefill" link set pd0 up
ip -n "$ns_decode" link set pd0 up
ip -n "$ns_router" route add "$b.1/32" via "$a.2"

in_ns() { # in_ns NAMESPACE CMD...: CMD inside NAMESPACE
  local ns=$1
  shift
  ip netns exec "$ns" "$@"
}

(umask 077 && head -c 32 /dev/urandom | base64 > "$work/secret")
# The router's admin API (workers, flush_cache) is closed without a key.
(umask 077 && head -c 32 /dev/urandom | base64 > "$work/admin-key")
admin_auth="Authorization: Bearer $(cat "$work/admin-key")"
# Timeouts: a room that cannot pair fails after 3 s, one whose KV cannot land after 8 s; the
# router tries a request 3 times at most and gives up on it after 25 s; clients wait 35 s.
request_timeout=25
client_deadline=35
common=(--model-path "$model" --cluster-secret-file "$work/secret" --kv-cache-memory 16MiB
  --threads 1 --chunked-prefill-size 64 --bootstrap-timeout 3 --transfer-timeout 8)
in_ns "$ns_prefill" "$bin/tandem-prefill" "${common[@]}" --host 0.0.0.0 --port 8000 \
  --http-port 9000 --disaggregation-bootstrap-port 8998 --transfer-host "$b.1" \
  > "$work/prefill.log" 2>&1 &
in_ns "$ns_decode" "$bin/tandem-decode" "${common[@]}" --host "$a.3" --port 8001 \
  --http-port 9001 --transfer-host "$b.2" > "$work/decode.log" 2>&1 &
wait_http() { # wait_http NAMESPACE URL: up to 60 s for a 200
  local i
  for i in $(seq 1 600); do
    [ "$(in_ns "$1" curl -s -o /dev/null -w '%{http_code}' --max-time 2 "$2" || true)" = 200 ] &&
      return 0
    sleep 0.1
  done
  return 1
}
wait_http "$ns_prefill" "http://$b.1:9000/health" || fail "the prefill worker did not come up"
wait_http "$ns_decode" "http://$a.3:9001/health" || fail "the decode worker did not come up"
in_ns "$ns_router" "$bin/tandem-router" --model-path "$model" --host "$a.1" --port 30000 \
  --cluster-secret-file "$work/secret" --admin-key-file "$work/admin-key" \
  --pd-disaggregation --policy round_robin \
  --prefill "http://$b.1:8000" 8998 --decode "http://$a.3:8001" \
  --health-check-interval-secs 1 --health-success-threshold 1 --health-failure-threshold 1 \
  --retry-max-retries 2 --retry-initial-backoff-ms 50 --request-timeout-secs "$request_timeout" \
  --cb-timeout-duration-secs 2 \
  > "$work/router.log" 2>&1 &
router="http://$a.1:30000"
wait_http "$ns_router" "$router/health" || fail "the router did not come up"

faults=0 requests=0 succeeded=0 clear_errors=0
body() { # body I MAX_NEW: a greedy /generate body with a prompt unique to I
  printf '{"text":"Fortune %s: tell me about the sea.","sampling_params":{"temperature":0,"max_new_tokens":%s,"ignore_eos":true}}' "$1" "$2"
}
# send I MAX_NEW: one request from h1; writes $work/out.I (body) and $work/code.I (status).
send() {
  local code
  code=$(in_ns "$ns_router" curl -s -o "$work/out.$1" -w '%{http_code}' \
    --max-time "$client_deadline" -H 'Content-Type: application/json' \
    -d "$(body "$1" "$2")" "$router/generate") || true
  echo "${code:-000}" > "$work/code.$1"
}
# check I EXPECTED ALLOW_ERROR: classifies request I's answer against EXPECTED output ids (""
# when it must not succeed: sent across a partition).
check() {
  local i=$1 expected=$2 allow_error=$3 code out ids message
  code=$(cat "$work/code.$i")
  out=$(cat "$work/out.$i" 2> /dev/null || true)
  requests=$((requests + 1))
  [ "$code" != 000 ] || fail "request $i got no answer within ${client_deadline}s"
  if [ "$code" = 200 ]; then
    [ -n "$expected" ] || fail "request $i succeeded across the partition: $out"
    ids=$(jq -c '.output_ids' <<< "$out" 2> /dev/null || true)
    [ "$ids" = "$expected" ] || fail "request $i: output $ids, the clean run gave $expected"
    succeeded=$((succeeded + 1))
    return 0
  fi
  [ "$allow_error" = 1 ] || fail "request $i: HTTP $code: $out"
  message=$(jq -r '.error.message // empty' <<< "$out" 2> /dev/null || true)
  if [ "$code" -lt 500 ] || [ -z "$message" ]; then
    fail "request $i: HTTP $code without a clear error message: $out"
  fi
  echo "request $i: HTTP $code: $message"
  clear_errors=$((clear_errors + 1))
}
# batch FIRST COUNT MAX_NEW: COUNT requests from FIRST at once, in the background;
# wait_clients waits for every request sent in the background (not for the daemons).
clients=()
batch() {
  local i
  for i in $(seq "$1" $(($1 + $2 - 1))); do
    send "$i" "$3" &
    clients+=($!)
  done
}
wait_clients() {
  wait "${clients[@]}"
  clients=()
}

# The clean link's outputs (requests 1-6), the reference for everything after.
declare -A expected
for i in 1 2 3 4 5 6; do
  send "$i" 24
  [ "$(cat "$work/code.$i")" = 200 ] || fail "clean request $i: $(cat "$work/out.$i")"
  expected[$i]=$(jq -c '.output_ids' < "$work/out.$i")
done

if [ "$mode" = partition ]; then
  batch 1 6 24
  sleep 0.2
  ip -n "$ns_decode" link set pd0 down # the decode end; the prefill end loses its carrier
  faults=$((faults + 1))
  echo "pd0 down"
  batch 11 3 24 # sent into the partition
  wait_clients
  for i in 1 2 3 4 5 6; do check "$i" "${expected[$i]}" 1; done
  for i in 11 12 13; do check "$i" "" 1; done
  ip -n "$ns_decode" link set pd0 up
  echo "pd0 up"
  # Bootstrap connections reconnect on their own; the prefill worker, whose transfer engine
  # declared the decode worker dead, answers its next room with RegisterAgain and imports its
  # descriptor anew when it registers again: within 20 attempts a request gets through.
  healed=0
  for _ in $(seq 1 20); do
    send 1 24
    [ "$(cat "$work/code.1")" = 200 ] && healed=1 && break
    sleep 1
  done
  [ "$healed" = 1 ] || fail "no request succeeded within 20 attempts after the link came back"
  batch 1 6 24
  wait_clients
  for i in 1 2 3 4 5 6; do check "$i" "${expected[$i]}" 0; done
else
  # netem where the kernel has it; otherwise a token bucket slow enough, with a queue short
  # enough, that bursts of KV writes are delayed and their excess packets dropped.
  for ns in "$ns_prefill" "$ns_decode"; do
    tc -n "$ns" qdisc add dev pd0 root netem delay 50ms 10ms loss 5% 2> /dev/null ||
      tc -n "$ns" qdisc add dev pd0 root tbf rate 4mbit burst 8kb limit 16kb
    faults=$((faults + 1))
  done
  echo "pd0 (both ends): $(tc -n "$ns_prefill" qdisc show dev pd0)"
  batch 1 6 24
  wait_clients
  for i in 1 2 3 4 5 6; do check "$i" "${expected[$i]}" 0; done
  drops=$(tc -s -n "$ns_prefill" qdisc show dev pd0 | awk '/dropped/ {print $7}' | tr -d ',')
  echo "the shaped prefill end of pd0 dropped ${drops:-?} packets"
  for ns in "$ns_prefill" "$ns_decode"; do tc -n "$ns" qdisc del dev pd0 root; done
fi

# Every KV block free on both workers (after a flush of the prefill worker's prefix cache), and
# both workers healthy in the router's view.
blocks_free() { # blocks_free NAMESPACE METRICS_URL
  local i m free total
  for i in $(seq 1 300); do
    in_ns "$ns_router" curl -s -o /dev/null --max-time 5 -X POST -H "$admin_auth" \
      "$router/flush_cache" || true
    m=$(in_ns "$1" curl -s --max-time 5 "$2" || true)
    free=$(awk '$1 == "tandem_engine_kv_free_blocks" {print $2}' <<< "$m")
    total=$(awk '$1 == "tandem_engine_kv_total_blocks" {print $2}' <<< "$m")
    if [ -n "$total" ] && [ "$total" != 0 ] && [ "$free" = "$total" ]; then
      echo "$2: $free of $total KV blocks free"
      return 0
    fi
    sleep 0.2
  done
  fail "$2: ${free:-?} of ${total:-?} KV blocks free after 60 s"
}
blocks_free "$ns_prefill" "http://$b.1:9000/metrics"
blocks_free "$ns_decode" "http://$a.3:9001/metrics"
healthy=""
for i in $(seq 1 300); do
  healthy=$(in_ns "$ns_router" curl -s --max-time 5 -H "$admin_auth" "$router/workers" |
    jq -c '[.workers[] | .healthy]' 2> /dev/null || true)
  [ "$healthy" = "[true,true]" ] && break
  sleep 0.2
done
[ "$healthy" = "[true,true]" ] || fail "the router's worker health did not converge: $healthy"

echo "[fault-summary] link_${mode}: faults_injected=$faults requests=$requests" \
  "succeeded=$succeeded clear_errors=$clear_errors dropped_connections=0 wrong_or_hung=0"
echo "PASS"
