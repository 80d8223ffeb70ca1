#!/usr/bin/env bash
# Installs every Debian 12 package Kiln's build, tests, demo and benchmarks need.
# Idempotent: when every package is already installed it returns without touching apt.
set -euo pipefail

PACKAGES=(
  build-essential cmake ninja-build ccache pkg-config git
  libgrpc++-dev libgrpc-dev protobuf-compiler-grpc libprotobuf-dev protobuf-compiler
  libonnx-dev libonnx-testdata libyaml-cpp-dev prometheus-cpp-dev libcivetweb-dev
  libboost1.74-dev libboost-system1.74-dev
  libgtest-dev libgmock-dev libbenchmark-dev
  libdnnl-dev ocl-icd-opencl-dev opencl-headers libspdlog-dev libfmt-dev libcli11-dev nlohmann-json3-dev
  libmimalloc-dev libsqlite3-dev
  postgresql-15 libpqxx-dev
  libssl-dev openssl curl ca-certificates python3
  python3-torchvision python3-numpy python3-onnx
  # The Python client, clients/python: its venv, build and runtime; README, Python client.
  python3-venv python3-wheel python3-grpcio python3-protobuf
  prometheus nodejs
  chromium-headless-shell  # the HTML run report in a real browser: tests/cli/html_report_browser_test.sh
  clang-14 libclang-rt-14-dev
)

missing=()
for p in "${PACKAGES[@]}"; do
  status=$(dpkg-query -W -f='${Status}' "$p" 2>/dev/null || true)
  [[ "$status" == "install ok installed" ]] || missing+=("$p")
done

# npm (the deploy validator's install, tests/deploy): Debian 12's nodejs ships without it and
# Debian's `npm` package provides it; a nodejs that bundles its own npm (NodeSource) conflicts with
# Debian's, so npm is installed only when none is on PATH.
if ! command -v npm >/dev/null 2>&1; then missing+=(npm); fi

if [[ ${#missing[@]} -eq 0 ]]; then
  exit 0
fi

echo "install-deps: installing ${missing[*]}" >&2
SUDO=""
if [[ $(id -u) -ne 0 ]]; then SUDO="sudo"; fi
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -qq
$SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
