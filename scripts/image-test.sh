#!/usr/bin/env bash
# make image-test: builds the image (scripts/image.sh), runs kilnd from it, and from the host
# checks health (the image's own HEALTHCHECK command too), uploads and compiles an example model,
# reads the metrics, checks kilnd runs as the non-root user, then stops it with SIGTERM (exit 0).
#
# docker: `docker run` with ephemeral host ports. buildah: `buildah run` (chroot isolation, which
# shares the host's network, so kilnd gets loopback ports 0 through KILN_LISTEN/KILN_METRICS_LISTEN)
# with a temporary host directory as /var/lib/kiln.
# Environment: as image.sh, plus KILN_IMAGE_TEST_SKIP_BUILD=1 to test an image already built and
# KILN_CLI (the host's kiln; default build/cli/kiln).
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
IMAGE=${KILN_IMAGE:-kiln:latest}
ENGINE=${KILN_IMAGE_ENGINE:-}
if [[ -z "$ENGINE" ]]; then
  if command -v docker >/dev/null 2>&1 && timeout 10 docker info >/dev/null 2>&1; then ENGINE=docker; else ENGINE=buildah; fi
fi
export KILN_IMAGE=$IMAGE KILN_IMAGE_ENGINE=$ENGINE
export STORAGE_DRIVER=${STORAGE_DRIVER:-vfs} BUILDAH_ISOLATION=${BUILDAH_ISOLATION:-chroot}
MODEL=mnist-ai85net5.qat
DEVICES=tt-emu:1,reference:1                 # ignored by a kilnd without a device pool
DEVICE_MODEL=$ROOT/tests/data/onnx/conv-cases/residual_add_relu.onnx
T0=$(date +%s)

if [[ "${KILN_IMAGE_TEST_SKIP_BUILD:-0}" != 1 ]]; then
  bash "$ROOT/scripts/image.sh"
fi
BUILD_S=$(( $(date +%s) - T0 ))

WORK=$(mktemp -d /tmp/kiln-image-test.XXXXXX)
CTR="" RUN_PID=""
descendants() {  # every descendant pid of $1, children first
  local c
  for c in $(pgrep -P "$1"); do descendants "$c"; echo "$c"; done
}
cleanup() {
  set +e
  if [[ "$ENGINE" == docker ]]; then
    [[ -n "$CTR" ]] && docker rm -f "$CTR" >/dev/null 2>&1
  else
    if [[ -n "$RUN_PID" ]]; then
      # buildah run -> buildah-chroot-runtime -> buildah-chroot-exec -> kilnd: end them all.
      local pids
      pids="$(descendants "$RUN_PID") $RUN_PID"
      kill -TERM $pids 2>/dev/null; sleep 1; kill -KILL $pids 2>/dev/null
    fi
    [[ -n "$CTR" ]] && buildah rm "$CTR" >/dev/null 2>&1
  fi
  rm -rf "$WORK"
}
trap cleanup EXIT
fail() { echo "image-test: FAIL: $*" >&2; [[ -f "$WORK/kilnd.log" ]] && tail -20 "$WORK/kilnd.log" >&2; exit 1; }
step() { echo "image-test: $*" >&2; }

# --- image configuration
if [[ "$ENGINE" == docker ]]; then
  USER_CFG=$(docker image inspect --format '{{.Config.User}}' "$IMAGE")
  HC=$(docker image inspect --format '{{json .Config.Healthcheck.Test}}' "$IMAGE")
  SIZE=$(docker image inspect --format '{{.Size}}' "$IMAGE" | numfmt --to=iec)
else
  USER_CFG=$(buildah inspect --type image --format '{{.Docker.Config.User}}' "$IMAGE")
  HC=$(buildah inspect --type image --format '{{.Docker.Config.Healthcheck.Test}}' "$IMAGE")
  SIZE=$(buildah images --format '{{.Size}}' --noheading "$IMAGE" | head -n1)
fi
[[ "$USER_CFG" == 10001:10001 ]] || fail "image USER is '$USER_CFG', want 10001:10001"
[[ "$HC" == *"kiln --server"*" health"* ]] || fail "image HEALTHCHECK is '$HC', want one running kiln health"
step "image $IMAGE: size $SIZE, user $USER_CFG, healthcheck $HC"

# --- start kilnd from the image
if [[ "$ENGINE" == docker ]]; then
  CTR=$(docker run -d -e "KILN_DEVICES=$DEVICES" -p 127.0.0.1::50051 -p 127.0.0.1::9464 "$IMAGE")
  GRPC=$(docker port "$CTR" 50051/tcp | head -n1)
  METRICS=$(docker port "$CTR" 9464/tcp | head -n1)
  INNER_GRPC=127.0.0.1:50051
  exec_in() { docker exec "$CTR" "$@"; }
  # The image's HEALTHCHECK must turn the container healthy.
  for _ in $(seq 1 60); do
    st=$(docker inspect --format '{{.State.Health.Status}}' "$CTR")
    [[ "$st" == healthy ]] && break
    [[ "$(docker inspect --format '{{.State.Running}}' "$CTR")" == true ]] || { docker logs "$CTR" >&2; fail "container exited"; }
    sleep 1
  done
  [[ "$st" == healthy ]] || fail "container health is '$st' after 60 s"
  step "docker: container $CTR healthy (HEALTHCHECK)"
else
  CTR=$(buildah from --pull=never "$IMAGE")
  mkdir -p "$WORK/data" && chown 10001:10001 "$WORK/data"
  mkfifo "$WORK/stdout"
  # ENTRYPOINT as buildah run does not apply it; the image's ENV and USER do apply.
  buildah run --isolation chroot -v "$WORK/data:/var/lib/kiln" \
    --env KILN_LISTEN=127.0.0.1:0 --env KILN_METRICS_LISTEN=127.0.0.1:0 --env "KILN_DEVICES=$DEVICES" \
    "$CTR" -- /usr/local/bin/kilnd >"$WORK/stdout" 2>"$WORK/kilnd.log" &
  RUN_PID=$!
  exec 3<"$WORK/stdout"
  read -r -t 60 LINE <&3 || fail "kilnd from the image did not start"
  step "$LINE"
  GRPC=$(sed -n 's/.*grpc=\([^ ]*\).*/\1/p' <<<"$LINE")
  METRICS=$(sed -n 's/.*metrics=\([^ ]*\).*/\1/p' <<<"$LINE")
  INNER_GRPC=$GRPC
  exec_in() { buildah run --isolation chroot --env "KILN_LISTEN=$GRPC" "$CTR" -- "$@"; }
  # The image's HEALTHCHECK command, run inside the image as docker would.
  HC_CMD=$(buildah inspect --type image --format '{{range $i, $a := .Docker.Config.Healthcheck.Test}}{{if $i}}{{$a}} {{end}}{{end}}' "$IMAGE")
  HC_CMD=${HC_CMD% }
  [[ "$HC" == '[CMD-SHELL '* ]] || fail "HEALTHCHECK is not a shell command: $HC"
  exec_in /bin/sh -c "$HC_CMD" || fail "the image's HEALTHCHECK command failed: $HC_CMD"
  step "buildah: HEALTHCHECK command passes inside the image"
  KILND_PID=""
  for p in $(descendants "$RUN_PID"); do
    [[ "$(ps -o comm= -p "$p")" == kilnd ]] && KILND_PID=$p
  done
  [[ -n "$KILND_PID" ]] || fail "cannot find kilnd's pid under buildah run ($RUN_PID)"
  uid=$(ps -o uid= -p "$KILND_PID" | tr -d ' ')
  [[ "$uid" == 10001 ]] || fail "kilnd runs as uid $uid, want 10001"
  step "kilnd (pid $KILND_PID) runs as uid $uid"
fi

# --- from the host: health, upload, compile, metrics
CLI=${KILN_CLI:-$ROOT/build/cli/kiln}
[[ -x "$CLI" ]] || fail "no host kiln CLI at $CLI (build it: cmake --build build --target kiln, or set KILN_CLI)"
kiln() { "$CLI" --server "$GRPC" "$@"; }
kiln health || fail "kiln health (host CLI $CLI)"
exec_in kiln --server "$INNER_GRPC" health || fail "kiln health (the image's own CLI)"
ID=$(kiln upload "$ROOT/examples/models/$MODEL.onnx" 2>/dev/null) || fail "kiln upload"
kiln compile "$MODEL" --device MAX78000 --arch ai85net5 --dataset MNIST -o "$WORK/mnist.yaml" || fail "kiln compile"
grep -q '^arch: ai85net5' "$WORK/mnist.yaml" || fail "compiled YAML has no 'arch: ai85net5'"
step "uploaded $MODEL ($ID), compiled $(grep -c 'processors:' "$WORK/mnist.yaml") layers"
curl -fsS "http://$METRICS/metrics" >"$WORK/metrics" || fail "GET /metrics"
grep -q '^kiln_compile_total{.*result="ok".*} 1' "$WORK/metrics" || fail "metrics show no ok compile"
grep -q '^kiln_model_store_models 1' "$WORK/metrics" || fail "metrics show no stored model"
if [[ "$ENGINE" == buildah ]]; then
  owner=$(stat -c %u "$WORK/data/objects/$ID.onnx") || fail "model not in the data volume"
  [[ "$owner" == 10001 ]] || fail "stored model owned by uid $owner"
fi
step "metrics OK; model stored in the volume"
# Device jobs (oneDNN and OpenMP in the runtime image) once kilnd and kiln have them.
if exec_in kilnd --help | grep -q -- '--devices' && "$CLI" --help | grep -qE '^  run '; then
  kiln upload "$DEVICE_MODEL" >/dev/null 2>&1 || fail "kiln upload $(basename "$DEVICE_MODEL")"
  for backend in tt-emu reference; do
    kiln run residual_add_relu --backend "$backend" >"$WORK/run-$backend.txt" 2>&1 ||
      { cat "$WORK/run-$backend.txt" >&2; fail "kiln run --backend $backend"; }
    grep -q 'all layers pass' "$WORK/run-$backend.txt" || { cat "$WORK/run-$backend.txt" >&2; fail "kiln run --backend $backend: layers do not pass"; }
  done
  curl -fsS "http://$METRICS/metrics" | grep -q '^kiln_device_jobs_total{backend="reference",status="OK"} 1' ||
    fail "metrics show no finished reference job"
  step "device jobs: tt-emu and reference runs pass"
else
  step "device jobs skipped: this kilnd/kiln has no device pool"
fi

# --- SIGTERM: kilnd drains and exits 0
if [[ "$ENGINE" == docker ]]; then
  docker stop -t 30 "$CTR" >/dev/null
  rc=$(docker inspect --format '{{.State.ExitCode}}' "$CTR")
else
  kill -TERM "$KILND_PID"
  set +e; wait "$RUN_PID"; rc=$?; set -e
  RUN_PID=""
fi
[[ "$rc" == 0 ]] || fail "kilnd exited $rc after SIGTERM"
echo "image-test: PASS ($ENGINE, image $IMAGE, size $SIZE, build+test $(( $(date +%s) - T0 )) s, build ${BUILD_S} s)"
