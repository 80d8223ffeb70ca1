#!/usr/bin/env bash
# make bench: runs every benchmark program that was built (bench/*/ and the ai8x compile bench),
# each printing its figures beside its target.
set -euo pipefail
BUILD_DIR=${1:-build}
ROOT=$(cd "$(dirname "$0")/.." && pwd)
mapfile -t programs < <(find "$ROOT/$BUILD_DIR/bench" -mindepth 2 -maxdepth 2 -type f -executable 2>/dev/null | sort)
[[ -x "$ROOT/$BUILD_DIR/tests/ai8x/ai8x_bench" ]] && programs+=("$ROOT/$BUILD_DIR/tests/ai8x/ai8x_bench")
[[ ${#programs[@]} -gt 0 ]] || { echo "no benchmarks built"; exit 1; }
for b in "${programs[@]}"; do
  echo "== $(basename "$b")"
  "$b"
done
