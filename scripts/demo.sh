#!/usr/bin/env bash
# make demo: start kilnd on loopback (embedded defaults, a temporary data dir, free ports),
# run the main jobs on the bundled example models, print the kiln_ metrics, stop kilnd cleanly.
set -euo pipefail
BUILD_DIR=${1:-build}
ROOT=$(cd "$(dirname "$0")/.." && pwd)
KILND="$ROOT/$BUILD_DIR/server/kilnd"
KILN="$ROOT/$BUILD_DIR/cli/kiln"
WORK=$(mktemp -d /tmp/kiln-demo.XXXXXX)
KILND_PID=""

cleanup() {
  if [[ -n "$KILND_PID" ]] && kill -0 "$KILND_PID" 2>/dev/null; then kill -KILL "$KILND_PID"; fi
  rm -rf "$WORK"
}
trap cleanup EXIT

step() { printf '\n\033[1m== %s\033[0m\n' "$*"; }

step "starting kilnd (data dir $WORK/data)"
mkfifo "$WORK/stdout"
"$KILND" --listen 127.0.0.1:0 --metrics-listen 127.0.0.1:0 --data-dir "$WORK/data" \
  >"$WORK/stdout" 2>"$WORK/kilnd.log" &
KILND_PID=$!
exec 3<"$WORK/stdout"
if ! read -r -t 30 LINE <&3; then
  echo "kilnd did not start:"; cat "$WORK/kilnd.log"; exit 1
fi
echo "$LINE"
GRPC=$(sed -n 's/.*grpc=\([^ ]*\).*/\1/p' <<<"$LINE")
METRICS=$(sed -n 's/.*metrics=\([^ ]*\).*/\1/p' <<<"$LINE")
export KILN_SERVER="$GRPC"

step "kiln health"
"$KILN" health

step "kiln upload (examples/models)"
for f in "$ROOT"/examples/models/*.onnx; do
  printf '%-40s ' "$(basename "$f")"
  "$KILN" upload "$f" 2>/dev/null
done

step "kiln models"
"$KILN" models

step "kiln compile: ai8x YAML for MAX78000 (stored model, by name)"
"$KILN" compile mnist-ai85net5.qat --device MAX78000 --arch ai85net5 --dataset MNIST --table \
  -o "$WORK/mnist.yaml"
echo "--- $WORK/mnist.yaml (first 24 lines)"
head -24 "$WORK/mnist.yaml"
"$KILN" compile cifar10-ai85net5.qat --device MAX78000 --arch ai85net5 --dataset CIFAR10 \
  -o "$WORK/cifar10.yaml"
"$KILN" compile kws20-ai85kws20netv3.qat --device MAX78000 --arch ai85kws20netv3 --dataset KWS_20 \
  -o "$WORK/kws20.yaml"

step "kiln devices"
"$KILN" devices

step "kiln run: unet_small conv layers on tt-emu (HiFi2, bfloat8_b weights, per_layer) vs fp32"
"$KILN" run unet_small --backend tt-emu --math-fidelity HiFi2 --weights-dtype bfloat8_b \
  --mode per_layer --out "$WORK/out-tt-emu"

step "kiln run: the same model on the fp32 reference backend"
# --skip-reference compares nothing: exit status 4 ("0 compared"), expected here.
"$KILN" run unet_small --backend reference --skip-reference --out "$WORK/out-reference" || [[ $? -eq 4 ]]

step "metrics (kiln_ lines of http://$METRICS/metrics, histogram buckets omitted)"
curl -fsS "http://$METRICS/metrics" | grep '^kiln_' | grep -v '_bucket{'

step "stopping kilnd (SIGTERM)"
kill -TERM "$KILND_PID"
set +e
wait "$KILND_PID"
RC=$?
set -e
KILND_PID=""
echo "kilnd exited with status $RC"
exit "$RC"
