#!/usr/bin/env bash
# Quickstart: install dependencies, build, and run the model that ships with Tandem.
#
# The full quickstart starts a local router + prefill + decode cluster on the shipped model and
# sends it a chat request. The prefill and decode workers serve their gRPC legs and hand the KV
# cache over in this build, but the router's HTTP API is not built yet, so this script runs the
# shipped model in-process with tandem-run (the same serving engine) and shows how to start the
# workers.
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

prompt=${1:-"What is the meaning of life?"}
if [ -x build/bin/tandem-run ]; then
  echo "== asking $model_dir: $prompt"
  build/bin/tandem-run --model-path "$model_dir" --chat --prompt "$prompt" --max-new-tokens 64 \
    --temperature 0
  echo
else
  echo "quickstart: build/bin/tandem-run was not built; cannot run the model" >&2
  exit 1
fi

cat <<MSG

== what is missing for the local cluster
tandem-prefill and tandem-decode serve the Worker gRPC service (proto/worker.proto): a request's
prefill leg on the prefill worker, its KV cache pushed into the decode worker's blocks, tokens
streamed from the decode leg. The router's HTTP API (OpenAI and SGLang routes) is not built yet,
so nothing answers curl on a /v1 route. The workers:
  export TANDEM_CLUSTER_SECRET=\$(head -c 24 /dev/urandom | base64)
  build/bin/tandem-prefill --model-path $model_dir --port 8000 --http-port 9000 &
  build/bin/tandem-decode  --model-path $model_dir --port 8001 --http-port 9001 &
  curl -s localhost:9000/health; curl -s localhost:9001/metrics
MSG
