#!/usr/bin/env python3
"""End-to-end: a real Prometheus (Debian package) on loopback scrapes a real kilnd; the kiln CLI
drives RPCs; Prometheus's HTTP API must then return data for every kilnd metric, every Grafana
panel query and every alert/recording rule.

  prometheus_e2e.py --kilnd PATH --kiln PATH [--devices]

Without --devices it checks the core metrics and panels (kilnd runs without a device pool). With
--devices it starts kilnd with `--devices tt-emu:2,reference:1`, runs device jobs with `kiln run`
and checks everything, device metrics included; it exits 77 (ctest: skipped) when kilnd's --help
does not list --devices yet. Ephemeral ports, a temporary directory, a bounded run time; kilnd and
Prometheus are stopped (and die with this process) in every case.
"""
import argparse
import ctypes
import json
import math
import os
import re
import select
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.parse
import urllib.request

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, HERE)
import dashboard_check  # noqa: E402  (metric list, dashboard queries, variable substitution)

DEADLINE = time.monotonic() + 80  # whole test, ctest's TIMEOUT is 120
DEVICES = "tt-emu:2,reference:1"
MODELS = ["mnist-ai85net5.qat", "cifar10-ai85net5.qat"]
# A small all-device-op model for `kiln run` (the QAT examples carry quantization ops that only
# the ai8x compiler understands): milliseconds per job on either backend.
DEVICE_MODEL = "residual_add_relu"
SKIP = 77


class Fail(Exception):
    pass


class Fatal(Fail):
    """Stops a wait_for at once (the thing waited for can no longer happen)."""


def left():
    return DEADLINE - time.monotonic()


def log(msg):
    print(f"[{time.strftime('%H:%M:%S')}] {msg}", flush=True)


def die_with_parent():
    # Children get SIGKILL if this process dies (e.g. killed by ctest's timeout).
    libc = ctypes.CDLL("libc.so.6", use_errno=True)
    libc.prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def http_get(url, timeout=5):
    with urllib.request.urlopen(url, timeout=timeout) as r:
        return r.status, r.read().decode()


class Prom:
    def __init__(self, base):
        self.base = base

    def api(self, path, **params):
        url = f"{self.base}/api/v1/{path}"
        if params:
            url += "?" + urllib.parse.urlencode(params)
        _, body = http_get(url)
        doc = json.loads(body)
        if doc.get("status") != "success":
            raise Fail(f"Prometheus {path} {params}: {doc}")
        return doc["data"]

    def query(self, expr):
        data = self.api("query", query=expr)
        if data["resultType"] != "vector":
            raise Fail(f"{expr}: result type {data['resultType']}")
        return data["result"]

    def value(self, expr):
        """The single sample's value of expr (Fail unless exactly one sample)."""
        res = self.query(expr)
        if len(res) != 1:
            raise Fail(f"{expr}: want 1 sample, got {res}")
        return float(res[0]["value"][1])


def wait_for(what, fn, timeout):
    end = min(time.monotonic() + timeout, DEADLINE)
    last = None
    while time.monotonic() < end:
        try:
            v = fn()
            if v:
                return v
        except Fatal:
            raise
        except (OSError, Fail, ValueError) as e:
            last = e
        time.sleep(0.25)
    raise Fail(f"timed out waiting for {what}" + (f" (last error: {last})" if last else ""))


def parse_metrics(text):
    """{(name, frozenset(labels)): value} of a Prometheus text exposition."""
    out = {}
    for line in text.splitlines():
        if not line or line.startswith("#"):
            continue
        m = re.match(r"^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{(.*)\})? (\S+)", line)
        if not m:
            continue
        labels = frozenset(re.findall(r'(\w+)="((?:[^"\\]|\\.)*)"', m.group(3) or ""))
        out[(m.group(1), labels)] = float(m.group(4))
    return out


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--kilnd", required=True)
    ap.add_argument("--kiln", required=True)
    ap.add_argument("--devices", action="store_true", help="also the device pool metrics")
    args = ap.parse_args()

    prometheus, promtool = shutil.which("prometheus"), shutil.which("promtool")
    if not prometheus or not promtool:
        raise Fail("prometheus/promtool not found: install the Debian package 'prometheus' "
                   "(scripts/install-deps.sh)")
    help_text = subprocess.run([args.kilnd, "--help"], capture_output=True, text=True, timeout=10).stdout
    if args.devices and "--devices" not in help_text:
        print(f"SKIP: {args.kilnd} --help lists no --devices option (DeviceService not built yet); "
              "the device metrics part runs once it does")
        return SKIP

    metrics = dashboard_check.load_metrics()
    groups = {"core", "devices"} if args.devices else {"core"}
    expected = {n: t for n, (t, g) in metrics.items() if g in groups}

    work = tempfile.mkdtemp(prefix="kiln-prom-e2e.")
    procs = []
    try:
        # ---- kilnd
        # --max-model-bytes: the oversized upload of each round below is a counted refusal
        # (kiln_rejected_requests_total{reason="model_too_large"}, the dashboard's rejected panel).
        cmd = [args.kilnd, "--listen", "127.0.0.1:0", "--metrics-listen", "127.0.0.1:0",
               "--data-dir", os.path.join(work, "data"), "--max-model-bytes", str(4 << 20)]
        if args.devices:
            cmd += ["--devices", DEVICES]
        kilnd_log = open(os.path.join(work, "kilnd.log"), "w")
        kilnd = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=kilnd_log, text=True,
                                 preexec_fn=die_with_parent)
        procs.append(("kilnd", kilnd, os.path.join(work, "kilnd.log")))
        ready, _, _ = select.select([kilnd.stdout], [], [], min(30, left()))
        line = kilnd.stdout.readline() if ready else ""
        m = re.match(r"kilnd listening grpc=(\S+) metrics=(\S+)", line)
        if not m:
            raise Fail(f"kilnd did not start (first line {line!r})")
        grpc_addr, metrics_addr = m.group(1), m.group(2)
        log(f"kilnd: grpc={grpc_addr} metrics={metrics_addr}" + (f" devices={DEVICES}" if args.devices else ""))
        env = dict(os.environ, KILN_SERVER=grpc_addr)
        env.pop("KILN_TOKEN", None)

        def kiln(*argv, ok=True):
            r = subprocess.run([args.kiln, *argv], env=env, capture_output=True, text=True,
                               timeout=max(5, min(60, left())))
            if ok and r.returncode != 0:
                raise Fail(f"kiln {' '.join(argv)} exited {r.returncode}: {r.stderr.strip()}")
            if not ok and r.returncode == 0:
                raise Fail(f"kiln {' '.join(argv)} succeeded, expected an error")
            return r

        # ---- promtool check metrics: no complaints about kilnd's exposition
        _, text = http_get(f"http://{metrics_addr}/metrics")
        r = subprocess.run([promtool, "check", "metrics"], input=text, capture_output=True, text=True)
        if r.returncode != 0 or r.stdout.strip() or r.stderr.strip():
            raise Fail(f"promtool check metrics complains (exit {r.returncode}):\n{r.stdout}{r.stderr}")
        log("promtool check metrics: no complaints")

        # ---- Prometheus on loopback, scraping kilnd every second, evaluating the alert rules
        cfg = os.path.join(work, "prometheus.yml")
        with open(cfg, "w") as f:
            f.write(f"""global:
  scrape_interval: 1s
  scrape_timeout: 900ms
  evaluation_interval: 1s
rule_files:
  - {json.dumps(os.path.join(ROOT, "deploy", "prometheus", "kiln-alerts.yml"))}
scrape_configs:
  - job_name: kiln
    static_configs:
      - targets: [{json.dumps(metrics_addr)}]
""")
        # A free port can be taken between the probe and Prometheus's bind: then try another.
        for attempt in range(3):
            port = free_port()
            prom_log = os.path.join(work, f"prometheus-{attempt}.log")
            prom_proc = subprocess.Popen(
                [prometheus, f"--config.file={cfg}", f"--storage.tsdb.path={os.path.join(work, 'tsdb')}",
                 f"--web.listen-address=127.0.0.1:{port}", "--log.level=warn",
                 "--storage.tsdb.retention.time=1h", "--query.lookback-delta=1m"],
                stdout=open(prom_log, "w"), stderr=subprocess.STDOUT, preexec_fn=die_with_parent)
            procs.append(("prometheus", prom_proc, prom_log))
            prom = Prom(f"http://127.0.0.1:{port}")

            def ready():
                if prom_proc.poll() is not None:
                    raise Fatal(f"prometheus exited with status {prom_proc.returncode}")
                return http_get(f"{prom.base}/-/ready")[0] == 200
            try:
                wait_for("Prometheus ready", ready, 30)
                break
            except Fail:
                if prom_proc.poll() is None or attempt == 2:
                    raise
                log(f"prometheus did not start on port {port} (exit {prom_proc.returncode}); retrying")
        wait_for("first scrape of kilnd (up == 1)",
                 lambda: prom.query('up{job="kiln"} == 1'), 20)
        log(f"prometheus {port}: scraping kilnd")

        # ---- drive RPCs, in two rounds with a scrape between them so that rate() sees increases
        def scrape_count():
            return prom.value('count_over_time(up{job="kiln"}[10m])')

        def next_scrapes(n=2):
            start = scrape_count()
            wait_for(f"{n} more scrapes", lambda: scrape_count() >= start + n, 15)

        model_files = [os.path.join(ROOT, "examples", "models", m + ".onnx") for m in MODELS]
        device_model_file = os.path.join(ROOT, "tests", "data", "onnx", "conv-cases", DEVICE_MODEL + ".onnx")
        oversized = os.path.join(work, "oversized.onnx")
        with open(oversized, "wb") as f:
            f.write(os.urandom(5 << 20))
        for rnd in (1, 2):
            kiln("health")
            kiln("upload", model_files[rnd - 1])
            kiln("upload", oversized, ok=False)  # RESOURCE_EXHAUSTED: over --max-model-bytes
            kiln("models")
            kiln("model", MODELS[0])
            kiln("model", "no-such-model", ok=False)  # NOT_FOUND
            out = os.path.join(work, f"mnist-{rnd}.yaml")
            # Two devices: two compiles (the compile cache keys on the options).
            kiln("compile", MODELS[0], "--device", "MAX78000" if rnd == 1 else "MAX78002", "--arch", "ai85net5",
                 "--dataset", "MNIST", "-o", out)
            if not os.path.getsize(out):
                raise Fail("kiln compile wrote an empty YAML")
            if args.devices:
                if rnd == 1:
                    kiln("upload", device_model_file)
                kiln("run", DEVICE_MODEL, "--backend", "tt-emu")
                kiln("run", DEVICE_MODEL, "--backend", "tt-emu")
                kiln("run", DEVICE_MODEL, "--backend", "reference")
            log(f"round {rnd}: RPCs done")
            next_scrapes(2)

        # round 1's compile again: answered from the compile cache
        kiln("compile", MODELS[0], "--device", "MAX78000", "--arch", "ai85net5", "--dataset", "MNIST",
             "-o", os.path.join(work, "mnist-cached.yaml"))
        next_scrapes(2)

        # ---- Prometheus's data agrees with kilnd's /metrics
        _, text = http_get(f"http://{metrics_addr}/metrics")
        direct = parse_metrics(text)
        exposed = {re.sub(r"_(bucket|sum|count)$", "", n) for n, _ in direct if n.startswith(("kiln_", "process_"))}
        failures = []
        # /metrics is kilnd's own endpoint: none of prometheus-cpp Exposer's series
        failures += [f"{n}: an exposer_ series is served" for n, _ in direct if n.startswith("exposer_")]
        # the gRPC series carry grpc_service/grpc_method, never the old full-name label
        failures += [f"{n}{dict(labels)}: label 'method'" for n, labels in direct
                     if n.startswith("kiln_grpc_") and any(k == "method" for k, _ in labels)]
        # every family kilnd exposes, and every one the list expects, has data in Prometheus
        for name in sorted(exposed | set(expected)):
            if name not in exposed:
                failures.append(f"{name}: kilnd does not expose it")
                continue
            series = [name + s for s in ("_bucket", "_sum", "_count")] \
                if any(n == name + "_bucket" for n, _ in direct) else [name]
            for s in series:
                res = prom.query(f'{s}{{job="kiln"}}')
                if not res:
                    failures.append(f"{s}: no data in Prometheus")
            if name not in metrics:
                log(f"note: {name} is exported but not in tests/deploy/kiln-metrics.txt "
                    "(add it, and to the dashboard)")

        def check(expr, want, tol=0.0):
            try:
                got = prom.value(expr)
            except Fail as e:
                failures.append(str(e))
                return
            if abs(got - want) > tol:
                failures.append(f"{expr} = {got}, want {want}")

        sizes = [os.path.getsize(f) for f in model_files + ([device_model_file] if args.devices else [])]
        check('kiln_model_store_models{job="kiln"}', len(sizes))
        check('kiln_model_store_bytes{job="kiln"}', sum(sizes))
        check('kiln_upload_bytes_total{job="kiln"}', sum(sizes))
        check('sum(kiln_build_info{job="kiln"})', 1)
        check('kiln_compile_total{job="kiln", target="ai8x", result="ok"}', 3)
        check('kiln_compile_duration_seconds_count{job="kiln", target="ai8x"}', 2)  # cache hits are not compiles
        check('kiln_compile_cache_hits_total{job="kiln"}', 1)
        check('kiln_compile_cache_misses_total{job="kiln"}', 2)
        check('kiln_grpc_requests_total{job="kiln", grpc_service="kiln.v1.ModelService", grpc_method="UploadModel", code="OK"}', len(sizes))
        check('kiln_grpc_requests_total{job="kiln", grpc_service="kiln.v1.CompileService", grpc_method="CompileAi8x", code="OK"}', 3)
        check('sum(kiln_grpc_requests_total{job="kiln", grpc_service="kiln.v1.ModelService", grpc_method="GetModel", code="NOT_FOUND"})', 2)
        check('kiln_grpc_request_duration_seconds_count{job="kiln", grpc_service="kiln.v1.ModelService", grpc_method="ListModels"}', 2)
        # Whether it rose, as a boolean: increase() extrapolates to the window's edges, so its value
        # for the 3 compiles depends on when the scrapes fell (2.504 was seen, over the old 1 ± 1.5).
        check('increase(kiln_compile_total{job="kiln", result="ok"}[1m]) > bool 0', 1)
        # process_*: kilnd started within this test, holds some descriptors below its limit
        check('time() - process_start_time_seconds{job="kiln"} < bool 300', 1)
        check('process_open_fds{job="kiln"} > bool 5', 1)
        check('process_open_fds{job="kiln"} < bool process_max_fds{job="kiln"}', 1)
        check('process_resident_memory_bytes{job="kiln"} > bool 1e6', 1)
        check('process_cpu_seconds_total{job="kiln"} > bool 0', 1)
        if args.devices:
            check('sum(kiln_device_jobs_total{job="kiln", backend="tt-emu", status="OK"})', 4)
            check('sum(kiln_device_jobs_total{job="kiln", backend="reference", status="OK"})', 2)
            check('kiln_device_job_duration_seconds_count{job="kiln", backend="tt-emu"}', 4)
            check('count(kiln_device_busy{job="kiln"})', 3)
            check('sum(kiln_device_queue_depth{job="kiln"})', 0)
            check('kiln:devices:count{backend="tt-emu"}', 2)
            check('kiln:devices:count{backend="reference"}', 1)
            # `kiln run` submits and watches a job (JobService)
            check('kiln_grpc_requests_total{job="kiln", grpc_service="kiln.v1.JobService", grpc_method="SubmitRun", code="OK"}', 6)
            check('kiln_jobs{job="kiln", state="succeeded"}', 6)
            check('sum(kiln_job_attempts_total{job="kiln", result="succeeded"})', 6)
        # the values Prometheus holds are the ones kilnd serves
        for (n, labels), v in direct.items():
            if n in ("kiln_model_store_models", "kiln_upload_bytes_total", "kiln_compile_total"):
                sel = ",".join(f'{k}="{val}"' for k, val in sorted(labels))
                check(f'{n}{{{sel}}}', v)

        # ---- every dashboard query returns data with a finite value
        with open(dashboard_check.DASHBOARD) as f:
            dash = json.load(f)
        checked = skipped = 0
        for title, ref, expr in dashboard_check.panel_queries(dash):
            if not args.devices and ("kiln_device_" in expr or "kiln_job_" in expr):
                skipped += 1
                continue
            res = prom.query(expr)
            vals = [float(s["value"][1]) for s in res]
            if not vals or not any(math.isfinite(v) for v in vals):
                failures.append(f"panel '{title}' {ref}: {expr} -> {res or 'no data'}")
            checked += 1
        for v in dash["templating"]["list"]:
            q = v.get("query")
            q = q.get("query") if isinstance(q, dict) else None
            m = re.match(r"label_values\((.*),\s*(\w+)\)$", q or "")
            if m:
                res = prom.query(dashboard_check.substitute(m.group(1)))
                if not any(m.group(2) in s["metric"] for s in res):
                    failures.append(f"dashboard variable {v['name']}: {q} has no values")
        log(f"dashboard: {checked} queries return data" +
            (f", {skipped} device queries skipped (no --devices)" if skipped else ""))

        # ---- the alert rules load and evaluate without errors on real data
        def rules_evaluated():
            rs = [r for g in prom.api("rules")["groups"] for r in g["rules"]]
            return rs if rs and all(not r.get("lastEvaluation", "").startswith("0001") for r in rs) else None
        rules = wait_for("rule evaluation", rules_evaluated, 10)
        with open(os.path.join(ROOT, "deploy", "prometheus", "kiln-alerts.yml")) as f:
            want_rules = len(re.findall(r"^\s+- (alert|record):", f.read(), re.M))
        if len(rules) != want_rules:
            failures.append(f"Prometheus loaded {len(rules)} rules, kiln-alerts.yml has {want_rules}")
        for r in rules:
            if r.get("health") != "ok":
                failures.append(f"rule {r['name']}: health {r.get('health')} {r.get('lastError', '')}")
            if r["type"] == "alerting" and r.get("state") == "firing":
                failures.append(f"alert {r['name']} fires on a healthy kilnd")
        for rec in ["kiln:grpc_requests:rate5m"] + (["kiln:devices:count", "kiln:devices_busy:sum"] if args.devices else []):
            if not prom.query(rec):
                failures.append(f"recording rule {rec} has no data")
        log(f"rules: {len(rules)} loaded, all evaluated")

        if failures:
            raise Fail("\n  ".join(["Prometheus checks failed:"] + failures))

        # ---- kilnd drains and exits 0 on SIGTERM
        kilnd.send_signal(signal.SIGTERM)
        try:
            rc = kilnd.wait(timeout=max(1, min(20, left())))
        except subprocess.TimeoutExpired:
            raise Fail("kilnd did not exit within 20 s of SIGTERM")
        if rc != 0:
            raise Fail(f"kilnd exited {rc} after SIGTERM")
        checked_metrics = len(exposed | set(expected))
        print(f"PASS: {checked_metrics} metric families and {checked} dashboard queries have data in Prometheus")
        return 0
    except Fail as e:
        print(f"FAIL: {e}")
        for name, p, logf in procs:
            try:
                with open(logf) as f:
                    tail = f.read()[-3000:]
                print(f"--- {name} log (tail)\n{tail}")
            except OSError:
                pass
        return 1
    finally:
        for name, p, _ in procs:
            if p.poll() is None:
                p.terminate()
                try:
                    p.wait(timeout=5)
                except subprocess.TimeoutExpired:
                    p.kill()
                    p.wait()
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
