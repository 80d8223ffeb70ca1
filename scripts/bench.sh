#!/usr/bin/env bash
# make bench: runs every benchmark program that was built, printing figures beside their targets.
set -euo pipefail
BUILD_DIR=${1:-build}
ROOT=$(cd "$(dirname "$0")/.." && pwd)
found=0
for b in $(find "$ROOT/$BUILD_DIR/bench" -type f -executable -name 'bench_*' 2>/dev/null | sort); do
  found=1
  echo "== $(basename "$b")"
  "$b"
done
[[ $found -eq 1 ]] || { echo "no benchmarks built"; exit 1; }
