#!/usr/bin/env bash
# Builds the RPC request libFuzzer target (tests/fuzz/rpc_request_fuzzer.cc: every kilnd RPC's
# request message, raw bytes and structured generation) with clang-14 (address + undefined
# sanitizers) in the loader fuzzer's build dir and runs it reproducibly: fixed -seed and -runs,
# seeded with tests/fuzz/rpc_corpus. Fails on any crash, leak, timeout or sanitizer report.
#
#   scripts/fuzz-rpc.sh                                   # CI (.ci/run, after fuzz-onnx.sh)
#   FUZZ_RPC_RUNS=500000 FUZZ_SEED=7 scripts/fuzz-rpc.sh  # longer local session
# Inputs that crash are written to build-fuzz/rpc-artifacts/; add fixed ones to tests/fuzz/rpc_corpus.
# Cost in CI, measured on the shared 2-core machine (load average 4-11 from other builds): the run,
# 20000 inputs at 420-870 inputs/s under ASan/UBSan, 25-50 s; the build, the 130 translation units
# that kiln_api adds to the loader fuzzer's, 22 min wall at -j2 on that loaded machine; they take
# 1-12 s of CPU each (13 sampled: mean ~4.5 s), ~10 CPU-minutes in all, so ~5 min at -j2 on an
# idle 2-core machine, seconds when ccache has them. The same
# entry point also runs in every build under ctest (rpc_fuzz_replay: the corpus plus 50000
# generated inputs, seed 1; rpc_fuzz_covers_every_rpc: every RPC's request message is fuzzed).
# (clang-14 builds the target: it rejects lambdas capturing a structured binding, so those use an
# init-capture.)
set -euo pipefail
cd "$(dirname "$0")/.."

BUILD=${FUZZ_BUILD_DIR:-build-fuzz}
RUNS=${FUZZ_RPC_RUNS:-20000}
SEED=${FUZZ_SEED:-1}
JOBS=${FUZZ_JOBS:-2}
MAX_LEN=${FUZZ_RPC_MAX_LEN:-4096}

# scripts/fuzz-onnx.sh configures the build dir (clang-14, sanitizers, KILN_FUZZ=ON).
if [ ! -f "$BUILD/build.ninja" ]; then
  echo "fuzz-rpc: $BUILD is not configured; run scripts/fuzz-onnx.sh first" >&2
  exit 1
fi
nice ninja -C "$BUILD" -j"$JOBS" rpc_request_fuzzer

WORK="$BUILD/rpc-fuzz-work"
rm -rf "$WORK" "$BUILD/rpc-artifacts"
mkdir -p "$WORK" "$BUILD/rpc-artifacts"
export ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1:abort_on_error=1:allocator_may_return_null=1}
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-halt_on_error=1:print_stacktrace=1}
echo "fuzz-rpc: seed=$SEED runs=$RUNS max_len=$MAX_LEN"
"$BUILD/tests/fuzz/rpc_request_fuzzer" \
  -seed="$SEED" -runs="$RUNS" -max_len="$MAX_LEN" -timeout=20 -rss_limit_mb=2560 \
  -artifact_prefix="$BUILD/rpc-artifacts/" -print_final_stats=1 \
  "$WORK" tests/fuzz/rpc_corpus
echo "fuzz-rpc: OK ($RUNS runs, seed $SEED, no crash/leak/sanitizer report)"
