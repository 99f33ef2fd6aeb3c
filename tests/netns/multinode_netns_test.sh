#!/usr/bin/env bash
# multinode_netns_test.sh BIN_DIR MODEL_DIR: five network-namespace hosts (deploy/netns/hosts.sh),
# the router on h1, prefill workers on h2 and h3, decode workers on h4 and h5, each started by
# deploy/multinode/launch.sh run on its own host. Requests go through the router from h1; the test
# checks every answer, that both prefill workers pushed KV (their transfer counters moved) and that
# the KV connections ran from the prefill hosts' addresses to the decode hosts' addresses, i.e.
# across the veth links. Everything is torn down on exit, failure included.
#
# Exit codes: 0 pass, 1 fail, 77 skipped (namespaces cannot be made here; the reason is printed).
set -euo pipefail

bin=${1:?usage: multinode_netns_test.sh BIN_DIR MODEL_DIR}
model=${2:?usage: multinode_netns_test.sh BIN_DIR MODEL_DIR}
repo=$(cd "$(dirname "$0")/../.." && pwd)
hosts="$repo/deploy/netns/hosts.sh"
launch="$repo/deploy/multinode/launch.sh"

# shellcheck source=tests/netns/lib.sh
source "$repo/tests/netns/lib.sh"
netns_require "$bin" curl
[ -f "$model/config.json" ] || fail "no model in $model"

id="mn$$"
subnet=10.$((RANDOM % 200 + 20)).$((RANDOM % 250))
work=$(mktemp -d "${TMPDIR:-/tmp}/tandem-netns.XXXXXX")
logs="$work/run/*.log"
log_lines=15
netns_setup "$subnet" 5

(umask 077 && head -c 32 /dev/urandom | base64 > "$work/cluster-secret")
cat > "$work/cluster.env" << EOF
P_IP=($subnet.2 $subnet.3)
D_IP=($subnet.4 $subnet.5)
ROUTER_IP=$subnet.1
MODEL_PATH=$model
TANDEM_BIN=$bin
SECRET_FILE=$work/cluster-secret
RUN_DIR=$work/run
KV_CACHE_MEMORY=64MiB
WORKER_THREADS=1
ROUTER_POLICY=round_robin
WAIT_SECS=60
STOP_TIMEOUT=10
ROUTER_ARGS="--health-check-interval-secs 2 --health-success-threshold 1"
EOF

# Workers first, each on its own host (the same script and file everywhere), then the router.
for h in 2 3 4 5; do
  "$hosts" --id "$id" exec "h$h" timeout 60 "$launch" start --env "$work/cluster.env" ||
    fail "launch.sh start on h$h"
done
"$hosts" --id "$id" exec h1 timeout 90 "$launch" start --env "$work/cluster.env" ||
  fail "launch.sh start on h1 (router)"
"$hosts" --id "$id" exec h1 "$launch" status --env "$work/cluster.env" || fail "router status"

# The workers listen on their hosts' addresses only: nothing answers on h1's own address there.
code=$("$hosts" --id "$id" exec h1 curl -s -o /dev/null -w '%{http_code}' --max-time 2 \
  "http://$subnet.1:9000/health" || true)
[ "$code" = 000 ] || fail "something answered on h1:9000 ($code); the workers are not separate"

router="http://$subnet.1:30000"
n=8
for i in $(seq 1 "$n"); do
  body=$("$hosts" --id "$id" exec h1 curl -s --max-time 30 -w '\n%{http_code}' "$router/generate" \
    -H 'Content-Type: application/json' \
    -d "{\"text\":\"Request $i: once upon a time\",\"sampling_params\":{\"max_new_tokens\":8,\"temperature\":0}}") ||
    fail "request $i: curl failed"
  code=${body##*$'\n'}
  body=${body%$'\n'*}
  [ "$code" = 200 ] || fail "request $i: HTTP $code: $body"
  grep -q '"text":"' <<< "$body" || fail "request $i: no text in the answer: $body"
  grep -Eq '"completion_tokens":[1-9]' <<< "$body" || fail "request $i: no tokens generated: $body"
done
echo "$n requests answered through the router on h1"

# The chat endpoint too (the router's tokenizer and chat template, then the same PD path).
chat=$("$hosts" --id "$id" exec h1 curl -s --max-time 30 "$router/v1/chat/completions" \
  -H 'Content-Type: application/json' \
  -d '{"messages":[{"role":"user","content":"Tell me a fortune."}],"max_tokens":8}') ||
  fail "chat request: curl failed"
grep -q '"content":' <<< "$chat" || fail "chat request: no message content: $chat"

# Each prefill worker pushed KV (round robin gives each half of the requests), and the transfer
# connections ran between the prefill and decode hosts' own addresses.
for p in 2 3; do
  metrics=$("$hosts" --id "$id" exec h1 curl -s --max-time 5 "http://$subnet.$p:9000/metrics") ||
    fail "metrics of the prefill worker on h$p"
  count=$(awk '$1 == "tandem_worker_transfer_seconds_count" {print $2}' <<< "$metrics")
  [ -n "$count" ] && [ "${count%.*}" -ge 1 ] ||
    fail "prefill worker on h$p reports no KV transfer (tandem_worker_transfer_seconds_count=${count:-absent})"
  peers=$("$hosts" --id "$id" exec "h$p" ss -Htn state established src "$subnet.$p" |
    awk '{print $4}' | grep -E "^$subnet\.[45]:" | sort -u || true)
  [ -n "$peers" ] || fail "no connection from prefill h$p to a decode host"
  echo "prefill h$p: $count KV transfers; connections to $(echo "$peers" | tr '\n' ' ')"
done

# A clean stop through the script, host by host, router first.
for h in 1 2 3 4 5; do
  "$hosts" --id "$id" exec "h$h" "$launch" stop --env "$work/cluster.env" > /dev/null ||
    fail "launch.sh stop on h$h"
done
left=$(for h in 1 2 3 4 5; do ip netns pids "tandem-$id-h$h" 2> /dev/null; done)
[ -z "$left" ] || fail "processes left after launch.sh stop: $left"
echo "PASS"
