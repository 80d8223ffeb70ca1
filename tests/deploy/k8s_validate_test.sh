#!/usr/bin/env bash
# ctest deploy_k8s_validate: deploy/k8s passes the schema + cross checks (file by file and as
# rendered by kubectl kustomize when kubectl is there), and each of a set of broken copies is
# rejected file by file with the expected message (so the validator is known to bite).
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
DEPLOY="$ROOT/deploy"
if [[ ! -d "$DEPLOY/node_modules/kubernetes-models" ]]; then
  echo "FAIL: $DEPLOY/node_modules is missing: run 'npm ci --ignore-scripts' in deploy/ (ctest fixture deploy_npm_ci does it when the npm registry is reachable)" >&2
  exit 1
fi
WORK=$(mktemp -d /tmp/kiln-k8s-test.XXXXXX)
trap 'rm -rf "$WORK"' EXIT

echo "== deploy/k8s"
node "$DEPLOY/validate-k8s.mjs" "$DEPLOY/k8s"

fails=0
# expect_reject NAME FILE OLD NEW WANT: a copy of deploy/k8s with OLD replaced by NEW in FILE must
# be rejected (exit 1) with WANT in the output.
expect_reject() {
  local name=$1 dir="$WORK/$1"
  cp -r "$DEPLOY/k8s" "$dir"
  F="$dir/$2" OLD="$3" NEW="$4" python3 -c '
import os, pathlib
p = pathlib.Path(os.environ["F"]); s = p.read_text()
assert os.environ["OLD"] in s, "edit target missing in " + str(p)
p.write_text(s.replace(os.environ["OLD"], os.environ["NEW"], 1))'
  set +e
  out=$(node "$DEPLOY/validate-k8s.mjs" --no-render --config-table "$ROOT/README.md" "$dir" 2>&1)
  rc=$?
  set -e
  if [[ $rc -eq 1 && "$out" == *"$5"* ]]; then
    echo "ok   rejected: $name"
  else
    echo "FAIL $name: want exit 1 and '$5', got exit $rc:"; echo "$out"
    fails=$((fails + 1))
  fi
}

expect_reject replicas-type deployment.yaml 'replicas: 1' 'replicas: "one"' "schema: /spec/replicas must be integer"
expect_reject port-type service.yaml 'port: 9464' 'port: nine' "Service kilnd: schema:"
expect_reject probe-port deployment.yaml $'readinessProbe:\n            grpc:\n              port: 50051' \
  $'readinessProbe:\n            grpc:\n              port: 50052' "readinessProbe is not a gRPC probe on 50051"
expect_reject config-key configmap.yaml 'compile_workers: 2' 'compile_worker: 2' "kilnd config key 'compile_worker' is unknown"
expect_reject selector service.yaml $'selector:\n    app.kubernetes.io/component: server' \
  $'selector:\n    app.kubernetes.io/component: srv' "Service selector does not match the kilnd pods"
expect_reject root-fs deployment.yaml 'readOnlyRootFilesystem: true' 'readOnlyRootFilesystem: false' "read-only root filesystem"
expect_reject unlisted kustomization.yaml '  - servicemonitor.yaml' '' "servicemonitor.yaml is not listed in resources"
expect_reject api-version hpa.yaml 'autoscaling/v2' 'autoscaling/v9' "no schema for apiVersion 'autoscaling/v9'"
expect_reject monitor-port servicemonitor.yaml 'port: metrics' 'port: metric' "ServiceMonitor endpoint port 'metric' is not a Service port"
expect_reject probe-missing deployment.yaml $'livenessProbe:\n            grpc:\n              port: 50051' \
  $'livenessProbe:\n            tcpSocket:\n              port: 50051' "livenessProbe is not a gRPC probe on 50051"
expect_reject hpa-scale-out hpa.yaml 'maxReplicas: 1' 'maxReplicas: 4' "needs HPA maxReplicas 1"
expect_reject rolling-update deployment.yaml 'type: Recreate' 'type: RollingUpdate' "needs strategy Recreate"
expect_reject shadowed-key configmap.yaml 'log_level: info' $'log_level: info\n    data_dir: /data' "kilnd config key 'data_dir' has no effect: KILN_DATA_DIR (image ENV)"

if [[ $fails -ne 0 ]]; then echo "$fails broken manifest(s) were not rejected"; exit 1; fi
echo "deploy/k8s valid; 13 broken variants rejected"
