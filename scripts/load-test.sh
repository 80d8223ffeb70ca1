#!/usr/bin/env bash
# Longer runs of kilnd's load test (tests/server/load_test.cc; CI runs it for 20 s via ctest).
# Usage: scripts/load-test.sh [SECONDS] [CLIENTS]   (defaults 300 and 64; build dir: $BUILD or build)
set -euo pipefail
cd "$(dirname "$0")/.."
build="${BUILD:-build}"
cmake --build "$build" --target kilnd_load_test
KILN_LOAD_SECONDS="${1:-300}" KILN_LOAD_CLIENTS="${2:-64}" "$build/tests/server/kilnd_load_test"
