#!/usr/bin/env bash
# Longer runs of the store's chaos suite (tests/store/store_chaos.cc; CI runs 100 kills and one
# disk-full pass): KILLS kill -9 per seed over SEEDS seeds, then the disk-full pass.
#   scripts/store-chaos.sh [BUILD_DIR]      env: KILLS (default 1000), SEEDS (default 3)
set -euo pipefail
cd "$(dirname "$0")/.."
build=${1:-build}
kills=${KILLS:-1000}
seeds=${SEEDS:-3}
cmake --build "$build" --target store_chaos >/dev/null
for seed in $(seq 1 "$seeds"); do
  "$build/tests/store/store_chaos" --kills "$kills" --seed "$seed"
done
"$build/tests/store/store_chaos" --disk-full
