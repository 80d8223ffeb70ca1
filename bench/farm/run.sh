#!/usr/bin/env bash
# The farm's benchmark (README "Benchmarks"; figures in bench/farm/RESULTS.md). Runs bench_farm
# three times, each printing its own ratios measured in that run:
#   1. the defaults: 2 replicas + 1, 2, 3 workers (`--devices reference:1`), 3 rounds of 200 tiny
#      jobs from 8 clients, idle-farm claim latency, worker metrics; then database vs embedded
#      upload and compile of the stored mnist-ai85net5 (--compile-cache-bytes 0)
#   2. the same farm with OMP_WAIT_POLICY=passive in the workers' environment (libgomp's idle
#      threads sleep instead of spinning: see RESULTS.md)
#   3. the same farm on tt-emu workers (`--devices tt-emu:1`)
# Extra arguments go to every bench_farm run (e.g. --rounds 5, --jobs 400).
#   bench/farm/run.sh [BUILD_DIR] [bench_farm args...]      (default build)
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
BUILD_DIR=${1:-build}
shift || true
BENCH="$ROOT/$BUILD_DIR/bench/farm/bench_farm"
[[ -x "$BENCH" ]] || { echo "no $BENCH: build the bench_farm target (and kilnd) first" >&2; exit 1; }
echo "== $(date -u +%FT%TZ) $(nproc) cores, load average: $(cut -d' ' -f1-3 /proc/loadavg)"
echo "== 1. defaults (reference workers; database vs embedded)"
"$BENCH" "$@"
echo
echo "== 2. workers with OMP_WAIT_POLICY=passive"
"$BENCH" --no-compile --worker-env OMP_WAIT_POLICY=passive "$@"
echo
echo "== 3. tt-emu workers"
"$BENCH" --no-compile --backend tt-emu "$@"
