#!/usr/bin/env bash
# Quickstart: install dependencies, build, and run the model that ships with Tandem.
#
# The full quickstart starts a local router + prefill + decode cluster on the shipped model and
# sends it a chat request. The daemons in this build start and serve /metrics and /health but do
# not serve requests yet (their /health says so), so this script runs the shipped model in-process
# with tandem-run instead and says what is missing for the cluster.
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
tandem-router, tandem-prefill and tandem-decode start, read their flags and YAML config and serve
/metrics and /health, but do not serve requests yet: the serving engine (continuous batching,
radix cache), the prefill/decode KV handoff and the router's API are still being built. Their
/health endpoints answer 503 and say so. Try:
  build/bin/tandem-decode --model-path $model_dir --local-prefill --http-port 9001 &
  curl -s localhost:9001/health; curl -s localhost:9001/metrics
MSG
