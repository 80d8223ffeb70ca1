#!/usr/bin/env bash
# ResNet-18 at 224x224 (torchvision resnet18, weights=None, seed 0, exported by
# scripts/torchvision_models.py) through `kiln run --local`: tt-emu exact HiFi4 CHAINED with
# --skip-reference against the same command with --backend reference, best of N each (runs
# interleaved, so both see the same machine), and the first conv alone from the per-layer report
# (host_emulation_seconds of /conv1/Conv). Prints both times, the ratios and the load average.
#   bench/tt_emu/resnet18_ratio.sh [BUILD_DIR] [N]     (default build, 3)
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
BUILD_DIR=${1:-build}
N=${2:-3}
KILN="$ROOT/$BUILD_DIR/cli/kiln"
[[ -x "$KILN" ]] || { echo "no $KILN: build the kiln target first" >&2; exit 1; }
WORK=$(mktemp -d)
trap 'rm -rf "$WORK"' EXIT
/usr/bin/python3 "$ROOT/scripts/torchvision_models.py" "$WORK" --models resnet18:224 >/dev/null
MODEL="$WORK/resnet18_224.onnx"
INPUT="input=$WORK/resnet18_224.input.npy"

run() {  # run BACKEND OUT.json [flags...]; exit 4 is kiln run's "nothing compared" (--skip-reference)
  local backend=$1 out=$2 rc=0
  shift 2
  "$KILN" run --local "$MODEL" --input "$INPUT" --backend "$backend" --report json --report-file "$out" "$@" \
    >/dev/null 2>&1 || rc=$?
  [[ $rc == 0 || $rc == 4 ]] || { echo "kiln run --backend $backend failed (exit $rc)" >&2; exit 1; }
}
for i in $(seq 1 "$N"); do
  run tt-emu "$WORK/emu.$i.json" --tt-emu-level exact --math-fidelity HiFi4 --mode chained --skip-reference
  run reference "$WORK/ref.$i.json" --mode chained
done
/usr/bin/python3 - "$WORK" "$N" <<'EOF'
import json, os, sys
work, n = sys.argv[1], int(sys.argv[2])
def best(prefix):
    runs, conv1 = [], []
    for i in range(1, n + 1):
        c = json.load(open(f"{work}/{prefix}.{i}.json"))["configurations"][0]
        runs.append(c["run_seconds"])
        conv1.append(next(l for l in c["layers"] if l["name"] == "/conv1/Conv")["host_emulation_seconds"])
    return min(runs), min(conv1)
emu, ref = best("emu"), best("ref")
load = os.getloadavg()
print(f"resnet18 224 chained, best of {n}: tt-emu exact HiFi4 {emu[0]:.3f} s, reference {ref[0]:.3f} s, "
      f"ratio {emu[0] / ref[0]:.2f}x (target <= 10x)")
print(f"first conv (/conv1/Conv), best of {n}: tt-emu {emu[1] * 1e3:.1f} ms, reference {ref[1] * 1e3:.1f} ms, "
      f"ratio {emu[1] / ref[1]:.2f}x (target <= 10x)")
print(f"load average {load[0]:.2f} {load[1]:.2f} {load[2]:.2f}")
EOF
