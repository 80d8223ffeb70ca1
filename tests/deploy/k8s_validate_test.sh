#!/usr/bin/env bash
# ctest deploy_k8s_validate: each overlay of deploy/k8s (embedded) passes the
# schema + cross checks, as rendered by validate-k8s.mjs and, when kubectl is there, by
# `kubectl kustomize` (whose rendering must equal validate-k8s's); and each of a set of broken
# copies is rejected with the expected message (so the validator is known to bite).
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
DEPLOY="$ROOT/deploy"
if [[ ! -d "$DEPLOY/node_modules/kubernetes-models" ]]; then
  echo "FAIL: $DEPLOY/node_modules is missing: run 'npm ci --ignore-scripts' in deploy/ (ctest fixture deploy_npm_ci does it when the npm registry is reachable)" >&2
  exit 1
fi
WORK=$(mktemp -d /tmp/kiln-k8s-test.XXXXXX)
trap 'rm -rf "$WORK"' EXIT

OVERLAYS=(embedded)
for o in "${OVERLAYS[@]}"; do
  echo "== deploy/k8s/overlays/$o"
  node "$DEPLOY/validate-k8s.mjs" --config-table "$ROOT/README.md" "$DEPLOY/k8s/overlays/$o"
done

fails=0
count=0
# expect_reject NAME OVERLAY WANT FILE OLD NEW [FILE OLD NEW]...: a copy of deploy/k8s with each
# OLD replaced by NEW in FILE (relative to deploy/k8s) must be rejected (exit 1) when OVERLAY is
# validated, with WANT in the output.
expect_reject() {
  local name=$1 overlay=$2 want=$3 dir="$WORK/$1"
  shift 3
  count=$((count + 1))
  cp -r "$DEPLOY/k8s" "$dir"
  while [[ $# -gt 0 ]]; do
    F="$dir/$1" OLD="$2" NEW="$3" python3 -c '
import os, pathlib
p = pathlib.Path(os.environ["F"]); s = p.read_text()
assert os.environ["OLD"] in s, "edit target missing in " + str(p)
p.write_text(s.replace(os.environ["OLD"], os.environ["NEW"], 1))'
    shift 3
  done
  set +e
  out=$(node "$DEPLOY/validate-k8s.mjs" --no-render --config-table "$ROOT/README.md" "$dir/overlays/$overlay" 2>&1)
  rc=$?
  set -e
  if [[ $rc -eq 1 && "$out" == *"$want"* ]]; then
    echo "ok   rejected: $name"
  else
    echo "FAIL $name: want exit 1 and '$want', got exit $rc:"; echo "$out"
    fails=$((fails + 1))
  fi
}

B=base
E=overlays/embedded

# Schema, ports, probes, selectors, security, config keys, kustomization.
expect_reject replicas-type embedded "schema: /spec/replicas must be integer" $E/deployment-patch.yaml 'replicas: 1' 'replicas: "one"'
expect_reject port-type embedded "Service kilnd: schema:" $B/service.yaml 'port: 9464' 'port: nine'
expect_reject probe-port embedded "readinessProbe is not a gRPC probe on 50051" $B/deployment.yaml \
  $'readinessProbe:\n            grpc:\n              port: 50051' $'readinessProbe:\n            grpc:\n              port: 50052'
expect_reject config-key embedded "kilnd config key 'compile_worker' is unknown" $B/configmap.yaml 'compile_workers: 2' 'compile_worker: 2'
expect_reject selector embedded "Service selector does not match the kilnd pods" $B/service.yaml \
  $'selector:\n    app.kubernetes.io/component: server' $'selector:\n    app.kubernetes.io/component: srv'
expect_reject root-fs embedded "read-only root filesystem" $B/deployment.yaml 'readOnlyRootFilesystem: true' 'readOnlyRootFilesystem: false'
expect_reject unlisted embedded "servicemonitor.yaml is not listed in resources" $B/kustomization.yaml '  - servicemonitor.yaml' ''
expect_reject api-version embedded "no schema for apiVersion 'autoscaling/v9'" $B/hpa.yaml 'autoscaling/v2' 'autoscaling/v9'
expect_reject monitor-port embedded "ServiceMonitor endpoint port 'metric' is not a Service port" $B/servicemonitor.yaml 'port: metrics' 'port: metric'
expect_reject probe-missing embedded "livenessProbe is not a gRPC probe on 50051" $B/deployment.yaml \
  $'livenessProbe:\n            grpc:\n              port: 50051' $'livenessProbe:\n            tcpSocket:\n              port: 50051'
expect_reject shadowed-key embedded "kilnd config key 'data_dir' has no effect: KILN_DATA_DIR (image ENV)" $B/configmap.yaml \
  'log_level: info' $'log_level: info\n    data_dir: /data'

# The embedded store: one kilnd, Recreate, HPA 1..1.
expect_reject hpa-scale-out embedded "an embedded model store needs HPA maxReplicas 1" $E/hpa-patch.yaml 'maxReplicas: 1' 'maxReplicas: 4'
expect_reject rolling-update embedded "an embedded model store needs strategy Recreate" $E/deployment-patch.yaml 'type: Recreate' 'type: RollingUpdate'
expect_reject embedded-replicas embedded "an embedded model store needs replicas: 1" $E/deployment-patch.yaml 'replicas: 1' 'replicas: 2'
expect_reject embedded-no-pvc embedded "/var/lib/kiln must be a PersistentVolumeClaim" $E/deployment-patch.yaml 'emptyDir: null' 'emptyDir: {sizeLimit: 1Gi}' \
  $E/deployment-patch.yaml $'persistentVolumeClaim:\n            claimName: kiln-models' ''




# Without kubectl, validate-k8s renders alone.
count=$((count + 1))
if out=$(KUBECTL="$WORK/no-such-kubectl" node "$DEPLOY/validate-k8s.mjs" --config-table "$ROOT/README.md" "$DEPLOY/k8s/overlays/embedded" 2>&1) &&
   [[ "$out" == *"rendered by validate-k8s only"* ]]; then
  echo "ok   embedded valid without kubectl"
else
  echo "FAIL embedded without kubectl:"; echo "$out"; fails=$((fails + 1))
fi
# validate-k8s's rendering must equal kubectl kustomize's: a kubectl whose rendering differs
# (one replica more) is caught.
if command -v "${KUBECTL:-kubectl}" >/dev/null; then
  count=$((count + 1))
  printf '#!/bin/sh\n"%s" "$@" | sed "s/replicas: 1/replicas: 3/"\n' "$(command -v "${KUBECTL:-kubectl}")" > "$WORK/kubectl-differs"
  chmod +x "$WORK/kubectl-differs"
  set +e
  out=$(KUBECTL="$WORK/kubectl-differs" node "$DEPLOY/validate-k8s.mjs" --config-table "$ROOT/README.md" "$DEPLOY/k8s/overlays/embedded" 2>&1)
  rc=$?
  set -e
  if [[ $rc -eq 1 && "$out" == *"Deployment/kilnd: validate-k8s's rendering differs from kubectl kustomize's"* ]]; then
    echo "ok   rejected: a kubectl kustomize rendering that differs"
  else
    echo "FAIL render-differs: want exit 1 and the difference, got exit $rc:"; echo "$out"; fails=$((fails + 1))
  fi
fi

if [[ $fails -ne 0 ]]; then echo "$fails of $count broken manifest(s) were not rejected"; exit 1; fi
echo "deploy/k8s overlays (${OVERLAYS[*]}) valid; all $count rejection checks passed"
