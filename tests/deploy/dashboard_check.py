#!/usr/bin/env python3
"""ctest deploy_dashboard_check: the Grafana dashboard is well-formed, every panel query is valid
PromQL (promtool parses it as a recording rule), and the dashboard and alert rules cover every
kilnd metric in kiln-metrics.txt and reference no other kiln_ metric (catches typos)."""
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
DASHBOARD = os.path.join(ROOT, "deploy", "grafana", "kiln-dashboard.json")
ALERTS = os.path.join(ROOT, "deploy", "prometheus", "kiln-alerts.yml")

# Values the end-to-end test and this check give Grafana's variables.
VARIABLES = {"$__rate_interval": "1m", "${__rate_interval}": "1m", "$job": "kiln", "${job}": "kiln",
             "$instance": ".*", "${instance}": ".*"}


def load_metrics():
    metrics = {}
    with open(os.path.join(HERE, "kiln-metrics.txt")) as f:
        for line in f:
            line = line.split("#", 1)[0].split()
            if line:
                metrics[line[0]] = (line[1], line[2])
    return metrics


def substitute(expr):
    for k in sorted(VARIABLES, key=len, reverse=True):
        expr = expr.replace(k, VARIABLES[k])
    return expr


def panel_queries(dash):
    """(panel title, refId, expr with variables substituted) for every query of every panel."""
    out = []
    for p in dash["panels"]:
        for sub in [p] + p.get("panels", []):
            for t in sub.get("targets", []):
                out.append((sub["title"], t["refId"], substitute(t["expr"])))
    return out


def metric_names(expr):
    """kiln_ and process_ metric family names referenced by an expression (histogram suffixes
    stripped)."""
    names = set()
    for m in re.findall(r"\b(?:kiln|process)_[a-z0-9_]+", expr):
        names.add(re.sub(r"_(bucket|sum|count)$", "", m))
    return names


# Labels kilnd no longer exports: `method` became grpc_service + grpc_method.
GONE_LABEL = re.compile(r"(?:\bby \(|\{|,)\s*(?:[a-z_]+\s*,\s*)*method\b|\$labels\.method\b|\{\{\s*method\s*\}\}")


def gone_labels(text):
    return bool(GONE_LABEL.search(text))


def check(dash, alerts_text):
    """Every problem found in a dashboard (and the alert rules), as messages."""
    errors = []
    metrics = load_metrics()

    for key in ("title", "uid", "panels", "templating", "schemaVersion"):
        if key not in dash:
            errors.append(f"dashboard has no '{key}'")
    var_names = [v["name"] for v in dash["templating"]["list"]]
    for v in ("datasource", "job", "instance"):
        if v not in var_names:
            errors.append(f"dashboard variable '{v}' missing")

    ids, cells = set(), {}
    for p in dash["panels"]:
        if p["id"] in ids:
            errors.append(f"duplicate panel id {p['id']}")
        ids.add(p["id"])
        g = p["gridPos"]
        if g["x"] < 0 or g["w"] <= 0 or g["x"] + g["w"] > 24 or g["h"] <= 0:
            errors.append(f"panel '{p['title']}' gridPos {g} outside the 24-column grid")
        for x in range(g["x"], g["x"] + g["w"]):
            for y in range(g["y"], g["y"] + g["h"]):
                if (x, y) in cells:
                    errors.append(f"panel '{p['title']}' overlaps '{cells[(x, y)]}' at {x},{y}")
                    break
                cells[(x, y)] = p["title"]
        if p["type"] == "row":
            continue
        if not p.get("targets"):
            errors.append(f"panel '{p['title']}' has no query")
        if p.get("datasource", {}).get("uid") != "${datasource}":
            errors.append(f"panel '{p['title']}' does not use the $datasource variable")
        refs = [t["refId"] for t in p.get("targets", [])]
        if len(refs) != len(set(refs)):
            errors.append(f"panel '{p['title']}' has duplicate refIds")
        for t in p.get("targets", []):
            if "$job" not in t["expr"] or "$instance" not in t["expr"]:
                errors.append(f"panel '{p['title']}' {t['refId']}: query ignores $job/$instance")
            if gone_labels(t["expr"]) or gone_labels(t.get("legendFormat", "")):
                errors.append(f"panel '{p['title']}' {t['refId']}: label 'method' is now grpc_service/grpc_method")

    queries = panel_queries(dash)
    used = set()
    for title, ref, expr in queries:
        names = metric_names(expr)
        used |= names
        for n in names - set(metrics):
            errors.append(f"panel '{title}' {ref}: unknown metric {n}")
        if re.search(r"\$\w", expr.replace("$1", "")):
            errors.append(f"panel '{title}' {ref}: unsubstituted variable in {expr}")
    for n in sorted(set(metrics) - used):
        errors.append(f"no dashboard panel shows {n}")

    for n in metric_names(alerts_text) - set(metrics):
        errors.append(f"alert rules use unknown metric {n}")
    if gone_labels(alerts_text):
        errors.append("alert rules use label 'method', now grpc_service/grpc_method")
    for required in ("KilnInstanceDown", "KilnHighErrorRatio", "KilnHighLatencyP99", "KilnDeviceQueueSaturated"):
        if f"alert: {required}" not in alerts_text:
            errors.append(f"alert {required} missing")

    # Every panel query must parse: promtool checks them as recording rules.
    promtool = shutil.which("promtool")
    if not promtool:
        errors.append("promtool not found (Debian package prometheus; run scripts/install-deps.sh)")
    else:
        with tempfile.TemporaryDirectory() as tmp:
            rules = os.path.join(tmp, "panels.yml")
            with open(rules, "w") as f:
                f.write("groups:\n  - name: dashboard\n    rules:\n")
                for i, (title, ref, expr) in enumerate(queries):
                    f.write(f"      - record: dashboard:panel_{i}\n        expr: {json.dumps(expr)}\n")
            r = subprocess.run([promtool, "check", "rules", rules], capture_output=True, text=True)
            if r.returncode != 0:
                errors.append("promtool rejects a panel query:\n" + r.stdout + r.stderr)

    return errors


def self_test(dash, alerts_text):
    """The checker must catch each of these breakages (so a passing check means something)."""
    import copy
    def broken(edit):
        d = copy.deepcopy(dash)
        edit(d)
        return d
    panels = [p for p in dash["panels"] if p["type"] != "row"]
    first = dash["panels"].index(panels[0])
    cases = [
        ("metric typo", lambda d: d["panels"][first]["targets"][0].update(
            expr=d["panels"][first]["targets"][0]["expr"] + " + kiln_grpc_request_total"), "unknown metric kiln_grpc_request_total"),
        ("unparsable query", lambda d: d["panels"][first]["targets"][0].update(
            expr="sum(rate(kiln_upload_bytes_total{job=\"$job\", instance=~\"$instance\"}[$__rate_interval])"), "promtool rejects a panel query"),
        ("duplicate id", lambda d: d["panels"][first + 1].update(id=d["panels"][first]["id"]), "duplicate panel id"),
        ("overlap", lambda d: d["panels"][first + 1].update(gridPos=dict(d["panels"][first]["gridPos"])), "overlaps"),
        ("no $job", lambda d: d["panels"][first]["targets"][0].update(
            expr=d["panels"][first]["targets"][0]["expr"].replace('job="$job", ', "")), "ignores $job/$instance"),
        ("old method label", lambda d: d["panels"][first]["targets"][0].update(
            expr='sum by (method) (rate(kiln_grpc_requests_total{job="$job", instance=~"$instance"}[5m]))'),
         "label 'method' is now grpc_service/grpc_method"),
        ("metric not shown", lambda d: d.update(panels=[p for p in d["panels"]
            if not any("kiln_upload_bytes_total" in t["expr"] for t in p.get("targets", []))]), "no dashboard panel shows kiln_upload_bytes_total"),
    ]
    failed = 0
    for name, edit, want in cases:
        errs = check(broken(edit), alerts_text)
        if any(want in e for e in errs):
            print(f"ok   self-test: {name} caught")
        else:
            print(f"FAIL self-test: {name} not caught (want '{want}', got {errs})")
            failed += 1
    return failed


def main():
    dashboard = next((a for a in sys.argv[1:] if not a.startswith("--")), DASHBOARD)
    with open(dashboard) as f:
        dash = json.load(f)
    with open(ALERTS) as f:
        alerts_text = f.read()
    errors = check(dash, alerts_text)
    if errors:
        for e in errors:
            print("FAIL", e)
        return 1
    if "--self-test" in sys.argv and self_test(dash, alerts_text):
        return 1
    print(f"dashboard: {len(dash['panels'])} panels, {len(panel_queries(dash))} queries parse; "
          f"{len(load_metrics())} metrics covered")
    return 0


if __name__ == "__main__":
    sys.exit(main())
