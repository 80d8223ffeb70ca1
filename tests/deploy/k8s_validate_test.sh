#!/usr/bin/env bash
# ctest deploy_k8s_validate: each overlay of deploy/k8s (embedded, farm, farm-emulator) passes the
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

OVERLAYS=(embedded farm farm-emulator)
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
F=overlays/farm

# Schema, ports, probes, selectors, security, config keys, kustomization.
expect_reject replicas-type embedded "schema: /spec/replicas must be integer" $E/deployment-patch.yaml 'replicas: 1' 'replicas: "one"'
expect_reject port-type embedded "Service kilnd: schema:" $B/service.yaml 'port: 9464' 'port: nine'
expect_reject probe-port embedded "readinessProbe is not a gRPC probe on 50051" $B/deployment.yaml \
  $'readinessProbe:\n            grpc:\n              port: 50051' $'readinessProbe:\n            grpc:\n              port: 50052'
expect_reject config-key embedded "kilnd config key 'compile_worker' is unknown" $B/configmap.yaml 'compile_workers: 2' 'compile_worker: 2'
expect_reject selector embedded "Service selector does not match the kilnd pods" $B/service.yaml \
  $'selector:\n    app.kubernetes.io/component: server' $'selector:\n    app.kubernetes.io/component: srv'
expect_reject root-fs embedded "read-only root filesystem" $B/deployment.yaml 'readOnlyRootFilesystem: true' 'readOnlyRootFilesystem: false'
expect_reject grace embedded "kilnd: terminationGracePeriodSeconds (30) must exceed shutdown_grace + 10 s (30)" $B/deployment.yaml \
  'terminationGracePeriodSeconds: 40' 'terminationGracePeriodSeconds: 30'
expect_reject unlisted embedded "servicemonitor.yaml is not listed in resources" $B/kustomization.yaml '  - servicemonitor.yaml' ''
expect_reject api-version embedded "no schema for apiVersion 'autoscaling/v9'" $B/hpa.yaml 'autoscaling/v2' 'autoscaling/v9'
expect_reject monitor-port embedded "ServiceMonitor endpoint port 'metric' is not a Service port" $B/servicemonitor.yaml 'port: metrics' 'port: metric'
expect_reject probe-missing embedded "livenessProbe is not a gRPC probe on 50051" $B/deployment.yaml \
  $'livenessProbe:\n            grpc:\n              port: 50051' $'livenessProbe:\n            tcpSocket:\n              port: 50051'
expect_reject shadowed-key embedded "kilnd config key 'data_dir' has no effect: KILN_DATA_DIR (image ENV)" $B/configmap.yaml \
  'log_level: info' $'log_level: info\n    data_dir: /data'
expect_reject patch-target farm "patches with target or options are not rendered" $F/kustomization.yaml \
  '  - path: hpa-patch.yaml' $'  - path: hpa-patch.yaml\n    target:\n      kind: HorizontalPodAutoscaler'
expect_reject patch-no-match farm "HorizontalPodAutoscaler/kiln matches 0 objects" $F/hpa-patch.yaml 'name: kilnd' 'name: kiln'

# The embedded store: one kilnd, Recreate, HPA 1..1.
expect_reject hpa-scale-out embedded "an embedded model store needs HPA maxReplicas 1" $E/hpa-patch.yaml 'maxReplicas: 1' 'maxReplicas: 4'
expect_reject rolling-update embedded "an embedded model store needs strategy Recreate" $E/deployment-patch.yaml 'type: Recreate' 'type: RollingUpdate'
expect_reject embedded-replicas embedded "an embedded model store needs replicas: 1" $E/deployment-patch.yaml 'replicas: 1' 'replicas: 2'
expect_reject embedded-no-pvc embedded "/var/lib/kiln must be a PersistentVolumeClaim" $E/deployment-patch.yaml 'emptyDir: null' 'emptyDir: {sizeLimit: 1Gi}' \
  $E/deployment-patch.yaml $'persistentVolumeClaim:\n            claimName: kiln-models' ''

# The farm's kilnd replicas.
expect_reject farm-rwo-pvc farm "cannot share the ReadWriteOnce claim kiln-models" \
  $F/worker-serviceaccount.yaml 'automountServiceAccountToken: false' \
  $'automountServiceAccountToken: false\n---\napiVersion: v1\nkind: PersistentVolumeClaim\nmetadata:\n  name: kiln-models\nspec:\n  accessModes: [ReadWriteOnce]\n  resources:\n    requests:\n      storage: 20Gi' \
  $F/deployment-patch.yaml $'emptyDir:\n            sizeLimit: 8Gi' $'emptyDir: null\n          persistentVolumeClaim:\n            claimName: kiln-models'
expect_reject farm-replicas-vs-hpa farm "kilnd replicas (1) outside the HPA's bounds 2..10" $F/deployment-patch.yaml 'replicas: 2' 'replicas: 1'
expect_reject farm-pdb-blocks farm "allows no voluntary disruption" $B/pdb.yaml 'maxUnavailable: 1' 'minAvailable: 2'
expect_reject farm-blob-cache farm "blob_cache_bytes + max_upload_bytes_in_flight (10737418240) do not fit the data emptyDir" \
  $F/configmap-patch.yaml 'blob_cache_bytes: 4294967296' 'blob_cache_bytes: 8589934592'
expect_reject farm-ephemeral farm "exceed the pod's ephemeral-storage limit" $F/deployment-patch.yaml 'ephemeral-storage: 10Gi' 'ephemeral-storage: 4Gi'
expect_reject farm-kilnd-role farm "kilnd Deployment runs with role 'worker', want server" $F/configmap-patch.yaml 'log_level: info' $'log_level: info\n    role: worker'
expect_reject farm-no-database farm "kiln-worker next to a kilnd without a database" $F/configmap-patch.yaml '    database_url_file: /etc/kiln-database/url'$'\n' ''

# The database URL: a file in a mounted Secret, never a ConfigMap, args or env.
expect_reject url-in-configmap farm "ConfigMap kiln-config key database-url holds a database URL" $F/configmap-patch.yaml \
  $'\ndata:\n' $'\ndata:\n  database-url: postgresql://kiln:secret@db:5432/kiln\n'
expect_reject url-in-args farm "a database URL on the command line" $F/worker-daemonset.yaml \
  'args: ["--config", "/etc/kiln/kiln-worker.yaml"]' 'args: ["--config", "/etc/kiln/kiln-worker.yaml", "--database", "postgresql://kiln@db/kiln"]'
expect_reject url-in-env farm "KILN_DATABASE with a literal value" $B/deployment.yaml \
  '          env:'$'\n' $'          env:\n            - name: KILN_DATABASE\n              value: postgresql://kiln:secret@db/kiln\n'
expect_reject url-file-not-secret farm "database_url_file /etc/kiln/url is not in a mounted Secret" $F/configmap-patch.yaml \
  'database_url_file: /etc/kiln-database/url' 'database_url_file: /etc/kiln/url'
expect_reject url-secret-optional farm "the database Secret volume must not be optional" $F/deployment-patch.yaml \
  'secretName: kiln-database' $'secretName: kiln-database\n            optional: true'

# The farm's workers.
expect_reject worker-role farm "kiln-worker runs with role 'server', want worker" $F/worker-configmap.yaml 'role: worker' 'role: server'
expect_reject worker-no-db farm "kiln-worker needs the farm's database" $F/worker-configmap.yaml '    database_url_file: /etc/kiln-database/url'$'\n' ''
expect_reject worker-no-devices farm "kiln-worker: no devices configured" $F/worker-configmap.yaml '    devices: tt-emu:2,reference:1'$'\n' ''
expect_reject worker-heartbeat farm "job_heartbeat_seconds (30) must be below job_lease_seconds (30)" $F/worker-configmap.yaml \
  'job_heartbeat_seconds: 10' 'job_heartbeat_seconds: 30'
expect_reject worker-grace farm "kiln-worker: terminationGracePeriodSeconds (30) must exceed shutdown_grace + 10 s (70)" $F/worker-daemonset.yaml \
  'terminationGracePeriodSeconds: 90' 'terminationGracePeriodSeconds: 30'
expect_reject worker-nodes farm "DaemonSet kiln-worker selects no nodes" $F/worker-daemonset.yaml $'nodeSelector:\n        tenstorrent.com/device: "true"\n' ''
expect_reject worker-probe farm "kiln-worker: startupProbe is not a gRPC probe on 50051" $F/worker-daemonset.yaml \
  $'startupProbe:\n            grpc:\n              port: 50051' $'startupProbe:\n            grpc:\n              port: 9464'
expect_reject worker-sizelimit farm "kiln-worker: emptyDir volume 'data' needs a sizeLimit" $F/worker-daemonset.yaml $'emptyDir:\n            sizeLimit: 4Gi' 'emptyDir: {}'
expect_reject worker-unscraped farm "no PodMonitor or ServiceMonitor scrapes the kiln-worker pods" $F/worker-podmonitor.yaml \
  $'matchLabels:\n      app.kubernetes.io/component: worker' $'matchLabels:\n      app.kubernetes.io/component: workers'
expect_reject worker-monitor-port farm "PodMonitor kiln-worker endpoint port 'metric' is not a kiln-worker container port" $F/worker-podmonitor.yaml 'port: metrics' 'port: metric'

# Without kubectl, validate-k8s renders alone.
count=$((count + 1))
if out=$(KUBECTL="$WORK/no-such-kubectl" node "$DEPLOY/validate-k8s.mjs" --config-table "$ROOT/README.md" "$DEPLOY/k8s/overlays/farm" 2>&1) &&
   [[ "$out" == *"rendered by validate-k8s only"* ]]; then
  echo "ok   farm valid without kubectl"
else
  echo "FAIL farm without kubectl:"; echo "$out"; fails=$((fails + 1))
fi
# validate-k8s's rendering must equal kubectl kustomize's: a kubectl whose rendering differs
# (one replica more) is caught.
if command -v "${KUBECTL:-kubectl}" >/dev/null; then
  count=$((count + 1))
  printf '#!/bin/sh\n"%s" "$@" | sed "s/replicas: 2/replicas: 3/"\n' "$(command -v "${KUBECTL:-kubectl}")" > "$WORK/kubectl-differs"
  chmod +x "$WORK/kubectl-differs"
  set +e
  out=$(KUBECTL="$WORK/kubectl-differs" node "$DEPLOY/validate-k8s.mjs" --config-table "$ROOT/README.md" "$DEPLOY/k8s/overlays/farm" 2>&1)
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
