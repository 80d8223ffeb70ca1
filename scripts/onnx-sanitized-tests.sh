#!/usr/bin/env bash
# Builds and runs the ONNX front end's unit tests (onnx_loader_test, onnx_models_test,
# onnx_fuzz_corpus_replay) with address + undefined sanitizers (project option KILN_SANITIZE) in
# their own build dir. Fails on any test failure or sanitizer report. A few minutes on 2 cores.
#   scripts/onnx-sanitized-tests.sh        (SAN_BUILD_DIR, SAN_JOBS to override)
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD=${SAN_BUILD_DIR:-build-onnx-asan}
JOBS=${SAN_JOBS:-2}
mkdir -p "$BUILD"
cmake -S . -B "$BUILD" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DKILN_SANITIZE=ON >"$BUILD/configure.log" 2>&1 ||
  { cat "$BUILD/configure.log"; exit 1; }
nice ninja -C "$BUILD" -j"$JOBS" onnx_loader_test onnx_models_test onnx_fuzz_corpus_replay
export ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1:abort_on_error=1}
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-halt_on_error=1:print_stacktrace=1}
"$BUILD/tests/onnx/onnx_loader_test"
"$BUILD/tests/onnx/onnx_models_test"
"$BUILD/tests/fuzz/onnx_fuzz_corpus_replay" tests/fuzz/corpus tests/data/onnx
echo "onnx-sanitized-tests: OK"
