#!/usr/bin/env bash
# Builds the ONNX loader's libFuzzer target with clang-14 (address + undefined sanitizers) in its
# own build dir and runs it reproducibly: fixed -seed and -runs, seeded with tests/fuzz/corpus and
# the small models of tests/data/onnx. Fails on any crash, leak, timeout or sanitizer report.
#
#   scripts/fuzz-onnx.sh                  # CI: about a minute
#   FUZZ_RUNS=2000000 FUZZ_SEED=7 scripts/fuzz-onnx.sh   # longer local session
#   FUZZ_JOBS=1 ...                       # ninja parallelism (default 2)
# Inputs that crash are written to build-fuzz/artifacts/; add fixed ones to tests/fuzz/corpus.
set -euo pipefail
cd "$(dirname "$0")/.."

BUILD=${FUZZ_BUILD_DIR:-build-fuzz}
RUNS=${FUZZ_RUNS:-60000}
SEED=${FUZZ_SEED:-1}
JOBS=${FUZZ_JOBS:-2}
MAX_LEN=${FUZZ_MAX_LEN:-65536}

CC=${FUZZ_CC:-clang-14}
CXX=${FUZZ_CXX:-clang++-14}
SAN="-fsanitize=address,undefined -fno-sanitize-recover=undefined -fno-omit-frame-pointer"

if ! command -v "$CXX" >/dev/null; then
  echo "fuzz-onnx: $CXX not found; install the Debian packages clang-14 libclang-rt-14-dev" >&2
  exit 1
fi
mkdir -p "$BUILD"
cmake -S . -B "$BUILD" -G Ninja \
  -DCMAKE_BUILD_TYPE=Fuzz \
  -DCMAKE_C_COMPILER="$CC" -DCMAKE_CXX_COMPILER="$CXX" \
  -DCMAKE_C_FLAGS="-O1 -g $SAN -fsanitize=fuzzer-no-link" \
  -DCMAKE_CXX_FLAGS="-O1 -g $SAN -fsanitize=fuzzer-no-link" \
  -DCMAKE_EXE_LINKER_FLAGS="$SAN" \
  -DKILN_FUZZ=ON >"$BUILD/configure.log" 2>&1 || { cat "$BUILD/configure.log"; exit 1; }
nice ninja -C "$BUILD" -j"$JOBS" onnx_loader_fuzzer

# Seeds: the committed corpus plus every test model small enough to mutate quickly.
SEEDS="$BUILD/fuzz-seeds"
WORK="$BUILD/fuzz-work"
rm -rf "$SEEDS" "$WORK" "$BUILD/artifacts"
mkdir -p "$SEEDS" "$WORK" "$BUILD/artifacts"
cp tests/fuzz/corpus/* "$SEEDS"/ 2>/dev/null || true
find tests/data/onnx -type f -name '*.onnx' -size -"$MAX_LEN"c -exec cp {} "$SEEDS"/ \;

export ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1:abort_on_error=1:allocator_may_return_null=1}
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-halt_on_error=1:print_stacktrace=1}
echo "fuzz-onnx: seed=$SEED runs=$RUNS max_len=$MAX_LEN seeds=$(ls "$SEEDS" | wc -l)"
"$BUILD/tests/fuzz/onnx_loader_fuzzer" \
  -seed="$SEED" -runs="$RUNS" -max_len="$MAX_LEN" -timeout=20 -rss_limit_mb=2560 \
  -artifact_prefix="$BUILD/artifacts/" -print_final_stats=1 \
  "$WORK" "$SEEDS"
echo "fuzz-onnx: OK ($RUNS runs, seed $SEED, no crash/leak/sanitizer report)"
