#!/usr/bin/env bash
# ctest deploy_prometheus_config: docker/prometheus.yml (with the alert rules beside it, as
# docker-compose mounts them) passes `promtool check config`, and docker-compose.yml wires kilnd
# and Prometheus the way the Dockerfile and the rules expect.
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
command -v promtool >/dev/null || { echo "FAIL: promtool not found (Debian package prometheus; scripts/install-deps.sh)"; exit 1; }
WORK=$(mktemp -d /tmp/kiln-promcfg.XXXXXX)
trap 'rm -rf "$WORK"' EXIT
cp "$ROOT/docker/prometheus.yml" "$ROOT/deploy/prometheus/kiln-alerts.yml" "$WORK/"
promtool check config "$WORK/prometheus.yml"

python3 - "$ROOT" <<'PY'
import re, sys
root = sys.argv[1]
compose = open(f"{root}/docker/docker-compose.yml").read()
prom = open(f"{root}/docker/prometheus.yml").read()
dockerfile = open(f"{root}/docker/Dockerfile").read()
errors = []
def need(cond, msg):
    if not cond: errors.append(msg)
# Compose: both services, the image's ports, the data volume, the mounts Prometheus reads.
for svc in ("kilnd", "prometheus"):
    need(re.search(rf"^  {svc}:$", compose, re.M), f"compose has no service {svc}")
need("dockerfile: docker/Dockerfile" in compose and "context: .." in compose, "compose does not build docker/Dockerfile from the repository root")
need('"127.0.0.1:50051:50051"' in compose and '"127.0.0.1:9464:9464"' in compose, "compose does not publish 50051 and 9464")
need("kiln-data:/var/lib/kiln" in compose, "compose does not keep /var/lib/kiln on a volume")
need("../deploy/prometheus/kiln-alerts.yml:/etc/prometheus/kiln-alerts.yml" in compose, "compose does not mount the alert rules")
need("./prometheus.yml:/etc/prometheus/prometheus.yml" in compose, "compose does not mount prometheus.yml")
need("condition: service_healthy" in compose, "Prometheus does not wait for kilnd's HEALTHCHECK")
# Prometheus scrapes the compose service on the metrics port, as job "kiln" (the rules' job).
need(re.search(r"job_name: kiln\n\s+static_configs:\n\s+- targets: \[\"kilnd:9464\"\]", prom), "prometheus.yml does not scrape kilnd:9464 as job kiln")
# Dockerfile: the settings compose relies on.
for want in ("EXPOSE 50051 9464", 'VOLUME ["/var/lib/kiln"]', "KILN_LISTEN=0.0.0.0:50051", "KILN_METRICS_LISTEN=0.0.0.0:9464",
             "KILN_DATA_DIR=/var/lib/kiln", "USER 10001:10001", 'ENTRYPOINT ["/usr/local/bin/kilnd"]', "HEALTHCHECK",
             "FROM ${RUNTIME_IMAGE} AS runtime", "ARG RUNTIME_IMAGE=debian:bookworm-slim", "scripts/install-deps.sh"):
    need(want in dockerfile, f"Dockerfile lacks {want!r}")
need(re.search(r"^HEALTHCHECK .*\\\n\s+CMD kiln --server \"127\.0\.0\.1:\$\{KILN_LISTEN##\*:\}\" .*health", dockerfile, re.M),
     "HEALTHCHECK does not run `kiln --server 127.0.0.1:<KILN_LISTEN port> ... health`")
if errors:
    print("\n".join("FAIL " + e for e in errors)); sys.exit(1)
print("docker-compose.yml, prometheus.yml and Dockerfile agree")
PY
