#!/usr/bin/python3
"""Per-layer PCC of tt-emu on three CNNs, as markdown (the tables in bench/tt_emu/RESULTS.md).

Run with /usr/bin/python3 (Debian's python3-torch/torchvision export ResNet-18; `python3` on PATH
may be a pyenv shim without them):

    nice -n 10 /usr/bin/python3 bench/tt_emu/pcc_table.py build/cli/kiln [--models resnet18 unet_small]
        [--levels exact fast] [--modes chained per_layer] [--json-dir DIR] > table.md

For each model x tt-emu level x run mode it runs
    KILN run --local MODEL --input NAME=MODEL.input.npy --backend tt-emu --tt-emu-level LEVEL
             --mode MODE --report json
and prints a summary table (min / median PCC over the device layers — those with a tt-metal
threshold, docs/specs/tt-numerics.md §9 — the number below threshold, wall time) and, per model,
one row per layer with its PCC in every configuration and what the backend chose for it: the
report's LayerReport.program message when the binary has one, else its `detail` text.

Models: resnet18 = torchvision resnet18(weights=None) after torch.manual_seed(0) at 224x224,
exported by scripts/torchvision_models.py into a temporary directory (input: its seed-1 randn);
mobilenet_v2_0.5 and unet_small = tests/data/conv-cases/NAME.onnx with NAME.input.npy.
ResNet-18 exact takes tens of seconds per run on a 2-core machine; the whole script a few minutes.
Exit status: 0 when every run produced a report (layers below threshold included), 1 otherwise.
"""

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))
CASES = os.path.join(REPO, "tests", "data", "conv-cases")
MODELS = ["resnet18", "mobilenet_v2_0.5", "unet_small"]


def onnx_input_name(path):
    """The first graph input that is not an initializer (all three models have one input)."""
    import onnx  # Debian python3-onnx; imported here so --help works without it

    graph = onnx.load(path, load_external_data=False).graph
    inits = {i.name for i in graph.initializer}
    return next(i.name for i in graph.input if i.name not in inits)


def model_files(name, tmp):
    """(onnx path, input .npy path) for a model name; exports ResNet-18 into tmp."""
    if name == "resnet18":
        script = os.path.join(REPO, "scripts", "torchvision_models.py")
        subprocess.run([sys.executable, script, tmp, "--models", "resnet18:224"], check=True,
                       stdout=subprocess.DEVNULL)
        return os.path.join(tmp, "resnet18_224.onnx"), os.path.join(tmp, "resnet18_224.input.npy")
    return os.path.join(CASES, name + ".onnx"), os.path.join(CASES, name + ".input.npy")


def run_kiln(kiln, onnx_path, npy, level, mode):
    cmd = [kiln, "run", "--local", onnx_path, "--backend", "tt-emu", "--tt-emu-level", level,
           "--mode", mode, "--report", "json"]
    if npy and os.path.exists(npy):
        cmd[4:4] = ["--input", onnx_input_name(onnx_path) + "=" + npy]
    t0 = time.monotonic()
    p = subprocess.run(cmd, capture_output=True, text=True)
    wall = time.monotonic() - t0
    # kiln run exits 3 when a layer is below threshold: still a report.
    if p.returncode not in (0, 3) or not p.stdout.strip():
        sys.stderr.write("failed (%d): %s\n%s\n" % (p.returncode, " ".join(cmd), p.stderr))
        return None, wall, cmd
    return json.loads(p.stdout), wall, cmd


def flatten(value, prefix=""):
    """A JSON message as 'key=value' pairs (nested keys dotted), in the report's field order."""
    if isinstance(value, dict):
        out = []
        for k, v in value.items():
            out += flatten(v, prefix + k + ".")
        return out
    if isinstance(value, list):
        return [prefix[:-1] + "=[" + ",".join(str(x) for x in value) + "]"]
    return [prefix[:-1] + "=" + str(value)]


def choice(layer):
    if "program" in layer:
        return " ".join(flatten(layer["program"]))
    return layer.get("detail", "")


def device_layers(report):
    return [l for l in report.get("layers", []) if l.get("pcc_threshold", 0) > 0]


def md_cell(text):
    return text.replace("|", "\\|")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("kiln", help="path to the kiln CLI binary")
    ap.add_argument("--models", nargs="+", default=MODELS, choices=MODELS)
    ap.add_argument("--levels", nargs="+", default=["exact", "fast"])
    ap.add_argument("--modes", nargs="+", default=["chained", "per_layer"])
    ap.add_argument("--json-dir", help="also keep each raw report as DIR/MODEL.LEVEL.MODE.json")
    args = ap.parse_args()
    kiln = os.path.abspath(args.kiln)
    configs = [(lv, md) for lv in args.levels for md in args.modes]
    ok = True
    summary = []
    per_model = {}
    precision = {}
    t_all = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="kiln-pcc-") as tmp:
        for name in args.models:
            onnx_path, npy = model_files(name, tmp)
            per_model[name] = {}
            for level, mode in configs:
                report, wall, _ = run_kiln(kiln, onnx_path, npy, level, mode)
                sys.stderr.write("%s %s %s: %.1f s\n" % (name, level, mode, wall))
                if report is None:
                    ok = False
                    summary.append((name, level, mode, None, wall))
                    continue
                if args.json_dir:
                    os.makedirs(args.json_dir, exist_ok=True)
                    with open(os.path.join(args.json_dir, "%s.%s.%s.json" % (name, level, mode)),
                              "w") as f:
                        json.dump(report, f, indent=1)
                precision.setdefault(report.get("resolved_precision", ""), set()).add(name)
                per_model[name][(level, mode)] = report
                summary.append((name, level, mode, report, wall))
    total = time.monotonic() - t_all

    print("| model | level | mode | device layers | min PCC | median PCC | below threshold "
          "| threshold | host layers | last-layer PCC | run_seconds | wall s |")
    print("|---|---|---|---|---|---|---|---|---|---|---|---|")
    for name, level, mode, report, wall in summary:
        if report is None:
            print("| %s | %s | %s | run failed | | | | | | | | %.1f |" % (name, level, mode, wall))
            continue
        dev = device_layers(report)
        pccs = [l.get("pcc", 0.0) for l in dev if l.get("compared")]
        below = sum(1 for l in dev if l.get("compared") and not l.get("pass"))
        thr = sorted({l["pcc_threshold"] for l in dev})
        host = len(report.get("layers", [])) - len(dev)
        last = report["layers"][-1] if report.get("layers") else {}
        print("| %s | %s | %s | %d | %s | %s | %d | %s | %d | %s | %.2f | %.1f |" % (
            name, level, mode, len(dev),
            "%.6f" % min(pccs) if pccs else "-",
            "%.6f" % statistics.median(pccs) if pccs else "-",
            below, ",".join("%g" % t for t in thr), host,
            "%.6f" % last["pcc"] if last.get("compared") else "-",
            report.get("run_seconds", 0.0), wall))
    print()
    for p, names in precision.items():
        print("Resolved precision (%s): `%s`" % (", ".join(sorted(names)), p))
    print()
    print("Total wall time %.0f s." % total)

    for name in args.models:
        runs = per_model[name]
        if not runs:
            continue
        print()
        print("### %s: per-layer PCC" % name)
        print()
        print("Device layers (with a threshold) in graph order; `*` marks a PCC below it. "
              "Program/detail from the first configuration (a `≠` row follows where another "
              "configuration differs).")
        print()
        cols = [c for c in configs if c in runs]
        print("| # | layer | op | out shape | thr | " +
              " | ".join("%s %s" % c for c in cols) + " | program / detail |")
        print("|---|---|---|---|---|" + "---|" * len(cols) + "---|")
        first = runs[cols[0]]
        names = [l["name"] for l in device_layers(first)]
        by_cfg = {c: {l["name"]: l for l in runs[c].get("layers", [])} for c in cols}
        for i, lname in enumerate(names):
            l0 = by_cfg[cols[0]][lname]
            cells = []
            for c in cols:
                l = by_cfg[c].get(lname)
                if l is None or not l.get("compared"):
                    cells.append("-")
                else:
                    cells.append("%.6f%s" % (l["pcc"], "" if l.get("pass") else "*"))
            print("| %d | %s | %s | %s | %g | %s | %s |" % (
                i, md_cell(lname), l0.get("op", ""),
                "x".join(str(d) for d in l0.get("output_shape", [])), l0["pcc_threshold"],
                " | ".join(cells), md_cell(choice(l0))))
            for c in cols[1:]:
                l = by_cfg[c].get(lname)
                if l is not None and choice(l) != choice(l0):
                    print("| | ≠ %s %s | | | | %s| %s |" % (c[0], c[1], "| " * len(cols),
                                                           md_cell(choice(l))))
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
