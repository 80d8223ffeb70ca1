#!/usr/bin/python3
"""Exports torchvision CNNs to ONNX with PyTorch's own input and expected outputs.

Run with /usr/bin/python3 (Debian's python3-torch 1.13 + python3-torchvision 0.14; `python3` on
PATH may be a pyenv shim without them):

    /usr/bin/python3 scripts/torchvision_models.py OUT_DIR                  # the test set
    /usr/bin/python3 scripts/torchvision_models.py OUT_DIR --set bench      # benchmark set (224x224)
    /usr/bin/python3 scripts/torchvision_models.py OUT_DIR --models resnet18:224 resnet50:128
    /usr/bin/python3 scripts/torchvision_models.py --list [--set all]

A model spec is NAME:SIZE[:OPSET]: NAME a torchvision.models builder, SIZE the square input side
(input is 1x3xSIZExSIZE), OPSET the ONNX opset (default 17). For each spec, key NAME_SIZE (plus
_oOPSET when not the default), OUT_DIR receives:
    KEY.onnx          torch.onnx.export of the model (static shapes, eval mode)
    KEY.input.npy     the input, float32, torch.randn with generator seed 1
    KEY.output0.npy   PyTorch's output(s) for that input, float32 (output1... if more)
    KEY.stamp         hash of this script + spec; a matching stamp skips the model
and OUT_DIR/manifest.tsv lists the requested models, one per line:
    KEY <tab> NAME <tab> SIZE <tab> OPSET <tab> number of outputs
(rewritten only when its content changes, so build tools see stable timestamps).

Weights: torch.manual_seed(0) then torchvision.models.NAME(weights=None) — the same random
ResNet-18 the other tests and benchmarks use ("resnet18:224"). Segmentation models (builders of
torchvision.models.segmentation, also given weights_backbone=None) return a dict; they are
exported through a wrapper returning its values in key order ('out' first; node names then start
with /inner/).

Opset 17 by default: the newest opset torch 1.13 exports and the newest Kiln loads
(compiler/onnx/ir.h: 6..17), so models come out as a current exporter writes them (ConvNeXt's
LayerNorm as LayerNormalization, bilinear upsampling as Resize with pytorch_half_pixel). Pass
:14 (torch 1.13's default opset) or :13 to get the decomposed forms (ReduceMean/Pow/Sqrt).

Re-running with nothing changed does nothing (torch is not even imported). Exit status is 0 when
every requested model is present, 1 on a bad argument, 2 when an export failed.
"""

import argparse
import hashlib
import os
import sys
import tempfile

DEFAULT_OPSET = 17

# Test set: every family the conv path must run. Sizes bound test time (reference and tt-emu
# run every conv); ResNet-18 stays at 224 because other tests and the benchmark share it.
# Inception-v3 needs at least 75x75; the others are run at 64 (>= 2x2 after their /32 stem).
TEST_SET = [
    "resnet18:224",
    "resnet50:64",
    "mobilenet_v2:64",
    "mobilenet_v3_small:64",
    "mobilenet_v3_large:64",
    "efficientnet_b0:64",
    "regnet_y_400mf:64",
    "shufflenet_v2_x1_0:64",
    "squeezenet1_1:64",
    "densenet121:64",
    "googlenet:64",
    "inception_v3:75",
    "mnasnet1_0:64",
    "convnext_tiny:64",
    "convnext_tiny:64:14",  # torch 1.13's default opset: LayerNorm as ReduceMean/Sub/Pow/Sqrt/Div
    "fcn_resnet50:64",
    "deeplabv3_mobilenet_v3_large:64",
    "lraspp_mobilenet_v3_large:64",
]

# Benchmark set: the four networks bench/ compares against PyTorch, at 224x224.
BENCH_SET = [
    "resnet50:224",
    "mobilenet_v2:224",
    "densenet121:224",
    "efficientnet_b0:224",
]

SETS = {"test": TEST_SET, "bench": BENCH_SET, "all": TEST_SET + [s for s in BENCH_SET if s not in TEST_SET]}

INPUT_SEED = 1


class Spec:
    def __init__(self, text):
        parts = text.split(":")
        if len(parts) not in (2, 3) or not parts[0].isidentifier():
            raise ValueError(f"bad model spec {text!r}: want NAME:SIZE[:OPSET]")
        self.name = parts[0]
        try:
            self.size = int(parts[1])
            self.opset = int(parts[2]) if len(parts) == 3 else DEFAULT_OPSET
        except ValueError:
            raise ValueError(f"bad model spec {text!r}: SIZE and OPSET are integers") from None
        if self.size < 1 or not 7 <= self.opset <= 17:
            raise ValueError(f"bad model spec {text!r}: SIZE >= 1, OPSET in 7..17 (torch 1.13)")
        self.key = f"{self.name}_{self.size}" + ("" if self.opset == DEFAULT_OPSET else f"_o{self.opset}")

    def canonical(self):
        return f"{self.name}:{self.size}:{self.opset}"


def script_hash():
    with open(os.path.abspath(__file__), "rb") as f:
        return hashlib.sha256(f.read()).hexdigest()


def stamp_text(spec, digest):
    return f"{digest} {spec.canonical()}\n"


def read(path):
    try:
        with open(path, "r", encoding="utf-8") as f:
            return f.read()
    except OSError:
        return None


def up_to_date(out_dir, spec, digest):
    """True when KEY.stamp matches and every file it names exists; returns the output count too."""
    text = read(os.path.join(out_dir, spec.key + ".stamp"))
    if text is None:
        return False, 0
    lines = text.splitlines()
    if len(lines) != 2 or lines[0] + "\n" != stamp_text(spec, digest) or not lines[1].isdigit():
        return False, 0
    outputs = int(lines[1])
    files = [spec.key + ".onnx", spec.key + ".input.npy"] + [f"{spec.key}.output{i}.npy" for i in range(outputs)]
    return all(os.path.isfile(os.path.join(out_dir, f)) for f in files), outputs


def write_atomic(path, write):
    """Calls write(tmp_path) then renames, so an interrupted run never leaves a half file."""
    fd, tmp = tempfile.mkstemp(dir=os.path.dirname(path), prefix=".tmp-", suffix=os.path.basename(path))
    os.close(fd)
    try:
        write(tmp)
        os.chmod(tmp, 0o644)  # mkstemp creates 0600
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise


def export(out_dir, spec, digest):
    """Builds, runs and exports one model; returns its number of outputs."""
    import numpy as np
    import torch
    import torchvision

    kwargs = {"weights": None}
    builder = getattr(torchvision.models, spec.name, None)
    segmentation = builder is None
    if segmentation:
        builder = getattr(torchvision.models.segmentation, spec.name, None)
        # Segmentation builders default to a pretrained backbone (a download): random init too.
        kwargs["weights_backbone"] = None
    if builder is None or not callable(builder):
        raise ValueError(f"torchvision {torchvision.__version__} has no model {spec.name!r}")

    torch.manual_seed(0)
    model = builder(**kwargs).eval()

    class DictToTuple(torch.nn.Module):
        """Segmentation models return OrderedDict('out', ['aux']); ONNX export wants tensors."""

        def __init__(self, inner):
            super().__init__()
            self.inner = inner

        def forward(self, x):
            y = self.inner(x)
            return tuple(y.values()) if isinstance(y, dict) else y

    if segmentation:  # only these: the wrapper prefixes node names
        model = DictToTuple(model).eval()

    g = torch.Generator().manual_seed(INPUT_SEED)
    x = torch.randn(1, 3, spec.size, spec.size, generator=g, dtype=torch.float32)
    with torch.no_grad():
        y = model(x)
    outputs = list(y) if isinstance(y, (tuple, list)) else [y]

    def save_npy(array):
        def write(tmp):
            with open(tmp, "wb") as f:
                np.save(f, np.ascontiguousarray(array, dtype=np.float32))

        return write

    base = os.path.join(out_dir, spec.key)
    write_atomic(base + ".input.npy", save_npy(x.numpy()))
    for i, t in enumerate(outputs):
        write_atomic(f"{base}.output{i}.npy", save_npy(t.numpy()))
    write_atomic(
        base + ".onnx",
        lambda tmp: torch.onnx.export(
            model,
            x,
            tmp,
            opset_version=spec.opset,
            input_names=["input"],
            output_names=[f"output{i}" for i in range(len(outputs))],
            do_constant_folding=True,
        ),
    )

    def save_stamp(tmp):
        with open(tmp, "w", encoding="utf-8") as f:
            f.write(stamp_text(spec, digest) + f"{len(outputs)}\n")

    write_atomic(base + ".stamp", save_stamp)  # last: it vouches for the files above
    return len(outputs)


def main(argv):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("out_dir", nargs="?", help="output directory (created if missing)")
    parser.add_argument("--set", choices=sorted(SETS), default="test", help="named model set (default: test)")
    parser.add_argument("--models", nargs="+", metavar="NAME:SIZE[:OPSET]", help="explicit models (overrides --set)")
    parser.add_argument("--list", action="store_true", help="print the selected keys and specs, export nothing")
    parser.add_argument("--threads", type=int, default=1, help="torch threads for the reference run (default 1)")
    args = parser.parse_args(argv)

    try:
        specs = [Spec(s) for s in (args.models or SETS[args.set])]
    except ValueError as e:
        parser.error(str(e))
    keys = [s.key for s in specs]
    if len(set(keys)) != len(keys):
        parser.error("a model is listed twice")

    if args.list:
        for s in specs:
            print(f"{s.key}\t{s.canonical()}")
        return 0
    if not args.out_dir:
        parser.error("OUT_DIR is required unless --list")

    os.makedirs(args.out_dir, exist_ok=True)
    digest = script_hash()
    counts = {}
    todo = []
    for s in specs:
        ok, n = up_to_date(args.out_dir, s, digest)
        if ok:
            counts[s.key] = n
        else:
            todo.append(s)

    failed = []
    if todo:
        import time

        import torch

        torch.set_num_threads(max(1, args.threads))
        for s in todo:
            t0 = time.monotonic()
            try:
                counts[s.key] = export(args.out_dir, s, digest)
            except Exception as e:  # report every model, then fail
                failed.append(s.key)
                print(f"torchvision_models: {s.canonical()}: {type(e).__name__}: {e}", file=sys.stderr)
                continue
            print(f"torchvision_models: exported {s.key} ({time.monotonic() - t0:.1f} s)", file=sys.stderr)

    manifest = "".join(
        f"{s.key}\t{s.name}\t{s.size}\t{s.opset}\t{counts[s.key]}\n" for s in specs if s.key in counts
    )
    path = os.path.join(args.out_dir, "manifest.tsv")
    if read(path) != manifest:
        def save_manifest(tmp):
            with open(tmp, "w", encoding="utf-8") as f:
                f.write(manifest)

        write_atomic(path, save_manifest)
    return 2 if failed else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
