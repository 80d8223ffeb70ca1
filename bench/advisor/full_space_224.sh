#!/usr/bin/env bash
# The precision advisor over its full space (fidelity, weights, dest, l1acc, output_dtype) on ResNet-18
# at 224x224 (torchvision resnet18, weights=None, seed 0, exported by scripts/torchvision_models.py, its
# seed-1 input), tt-emu exact, for the targets 0.999, 0.99 and 0.98: per target whether it was met,
# the network PCC, the relative cost (1.0 = all HiFi4 bf16, api/advisor/cost_model.h: an estimate, not
# a card measurement), the best uniform configuration's cost, how much cheaper the answer is,
# the network / layer runs and the search time. Not in CI (minutes per target on 2 cores).
#   bench/advisor/full_space_224.sh [BUILD_DIR] [BUDGET_SECONDS] [MODELS...]   (default build, 0 = none, resnet18)
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
BUILD_DIR=${1:-build}
BUDGET=${2:-0}
shift $(( $# > 2 ? 2 : $# ))
MODELS=("${@:-resnet18}")
KILN="$ROOT/$BUILD_DIR/cli/kiln"
[[ -x "$KILN" ]] || { echo "no $KILN: build the kiln target first" >&2; exit 1; }
WORK=$(mktemp -d)
trap 'rm -rf "$WORK"' EXIT
for m in "${MODELS[@]}"; do
  /usr/bin/python3 "$ROOT/scripts/torchvision_models.py" "$WORK" --models "$m:224" >/dev/null
  for t in 0.999 0.99 0.98; do
    rc=0
    "$KILN" advise --local "$WORK/${m}_224.onnx" --input "input=$WORK/${m}_224.input.npy" --target-pcc "$t" \
      --space fidelity,weights,dest,l1acc,output_dtype --budget "$BUDGET" --json --quiet >"$WORK/$m.$t.json" || rc=$?
    # 0: target met; 3 / 4: not met / partial (cli/advise_command.cc) still carry the answer
    [[ $rc == 0 || $rc == 3 || $rc == 4 ]] || { echo "kiln advise $m $t failed (exit $rc)" >&2; exit 1; }
  done
  /usr/bin/python3 - "$WORK" "$m" <<'EOF'
import json, sys
work, m = sys.argv[1], sys.argv[2]
print(f"| {m} 224, target | met | network PCC | cost | best uniform | cheaper by | network runs / layer-runs | time |")
print("|---|---|---|---|---|---|---|---|")
for t in ("0.999", "0.99", "0.98"):
    a = json.load(open(f"{work}/{m}.{t}.json"))
    n, s = a["network"], a["search"]
    bu = n.get("best_uniform")
    cost, pcc = n.get("relative_cost"), n.get("pcc")
    cheaper = f"{100 * (1 - cost / bu['relative_cost']):.1f}%" if bu and cost is not None else "-"
    print(f"| {t} | {'yes' if a['target_met'] else 'no'}{' (partial)' if a['partial'] else ''} | "
          f"{pcc if pcc is None else round(pcc, 5)} | {cost if cost is None else round(cost, 4)} | "
          f"{round(bu['relative_cost'], 4) if bu else 'none'} | {cheaper} | "
          f"{s['network_runs']} / {s['layer_runs']} | {s['seconds']:.0f} s |")
EOF
done
