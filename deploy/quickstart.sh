#!/usr/bin/env bash
# Quickstart: install dependencies, build, start a local cluster (tandem-router in front of one
# tandem-prefill and one tandem-decode worker) on the model that ships with Tandem, send it one
# chat request through the router and print the answer. The cluster keeps running afterwards;
# the script prints how to query it and how to stop it.
#
#   deploy/quickstart.sh ["your question"]
#   TANDEM_ROUTER_PORT=30000 deploy/quickstart.sh     # ports are overridable
set -euo pipefail
cd "$(dirname "$0")/.."

echo "== installing dependencies (Debian packages)"
bash scripts/install-deps.sh
echo "== building"
bash scripts/build.sh

model_dir=$(ls -d models/*/ 2>/dev/null | head -n 1 || true)
model_dir=${model_dir%/}
if [ -z "$model_dir" ] || [ ! -f "$model_dir/config.json" ]; then
  echo "quickstart: no model under models/ — the shipped model is missing from this checkout" >&2
  exit 1
fi
for b in tandem-router tandem-prefill tandem-decode; do
  if [ ! -x "build/bin/$b" ]; then
    echo "quickstart: build/bin/$b was not built" >&2
    exit 1
  fi
done

router_port=${TANDEM_ROUTER_PORT:-30000}
prefill_port=${TANDEM_PREFILL_PORT:-30001}
prefill_http=${TANDEM_PREFILL_HTTP_PORT:-30011}
bootstrap_port=${TANDEM_BOOTSTRAP_PORT:-30021}
decode_port=${TANDEM_DECODE_PORT:-30002}
decode_http=${TANDEM_DECODE_HTTP_PORT:-30012}
run_dir=${TANDEM_RUN_DIR:-/tmp/tandem-quickstart}
mkdir -p "$run_dir"
secret_file="$run_dir/cluster-secret"
if [ ! -s "$secret_file" ]; then
  (umask 077; head -c 24 /dev/urandom | base64 > "$secret_file")
fi
# The router's admin API is closed without a key; tandemctl --run-dir "$run_dir" reads this file.
admin_key_file="$run_dir/admin-key"
if [ ! -s "$admin_key_file" ]; then
  (umask 077; head -c 24 /dev/urandom | base64 > "$admin_key_file")
fi
chmod 600 "$secret_file" "$admin_key_file"

pids=()
cleanup_on_error() {
  echo "quickstart: failed; stopping what was started (logs in $run_dir)" >&2
  for pid in "${pids[@]}"; do kill "$pid" 2>/dev/null || true; done
}
trap cleanup_on_error ERR

echo "== starting the prefill worker, the decode worker and the router (logs in $run_dir)"
build/bin/tandem-prefill --model-path "$model_dir" --port "$prefill_port" \
  --http-port "$prefill_http" --disaggregation-bootstrap-port "$bootstrap_port" \
  --cluster-secret-file "$secret_file" > "$run_dir/prefill.log" 2>&1 &
pids+=($!)
build/bin/tandem-decode --model-path "$model_dir" --port "$decode_port" \
  --http-port "$decode_http" --cluster-secret-file "$secret_file" > "$run_dir/decode.log" 2>&1 &
pids+=($!)
build/bin/tandem-router --pd-disaggregation --model-path "$model_dir" --port "$router_port" \
  --prefill "http://127.0.0.1:$prefill_port" "$bootstrap_port" \
  --decode "http://127.0.0.1:$decode_port" --cluster-secret-file "$secret_file" \
  --admin-key-file "$admin_key_file" --health-check-interval-secs 2 \
  --health-success-threshold 1 > "$run_dir/router.log" 2>&1 &
pids+=($!)
printf '%s\n' "${pids[@]}" > "$run_dir/pids"

echo -n "== waiting for the router to be ready"
ready=0
for _ in $(seq 1 180); do
  for pid in "${pids[@]}"; do
    if ! kill -0 "$pid" 2>/dev/null; then
      echo
      echo "quickstart: a daemon exited during start-up; see $run_dir/*.log" >&2
      tail -n 5 "$run_dir"/*.log >&2
      false
    fi
  done
  if curl -sf "http://127.0.0.1:$router_port/readiness" > /dev/null; then
    ready=1
    break
  fi
  echo -n "."
  sleep 1
done
echo
if [ "$ready" != 1 ]; then
  echo "quickstart: the router was not ready after 180 s; see $run_dir/*.log" >&2
  false
fi

prompt=${1:-"What is the meaning of life?"}
body=$(python3 -c 'import json,sys; print(json.dumps({"model": sys.argv[1], "messages": [{"role": "user", "content": sys.argv[2]}], "max_tokens": 64, "temperature": 0}))' "$(basename "$model_dir")" "$prompt")
echo "== asking through the router: $prompt"
answer=$(curl -sf "http://127.0.0.1:$router_port/v1/chat/completions" \
  -H 'Content-Type: application/json' -d "$body")
python3 -c 'import json,sys; print(json.loads(sys.argv[1])["choices"][0]["message"]["content"])' \
  "$answer"
trap - ERR

cat <<MSG

== the cluster is running (router :$router_port, prefill :$prefill_port, decode :$decode_port)
  curl -s localhost:$router_port/v1/chat/completions -H 'Content-Type: application/json' \\
    -d '{"model":"$(basename "$model_dir")","messages":[{"role":"user","content":"Hello"}],"stream":true}'
  curl -s localhost:$router_port/generate -d '{"text":"Once upon a time","sampling_params":{"max_new_tokens":32}}'
  curl -s localhost:$router_port/metrics
  curl -s localhost:$router_port/list_workers -H "Authorization: Bearer \$(cat $run_dir/admin-key)"
  build/bin/tandemctl --router http://127.0.0.1:$router_port --run-dir $run_dir workers list
To stop it:
  kill \$(cat $run_dir/pids)
MSG
