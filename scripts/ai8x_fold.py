#!/usr/bin/python3
"""Folds the constant subgraphs of ONNX models in numpy: the oracle for Kiln's plan-time folding.

Run with /usr/bin/python3 (Debian's python3-onnx 1.12 and python3-numpy):

    /usr/bin/python3 scripts/ai8x_fold.py OUT_DIR MODEL.onnx...

The ai8x-training exports compute their QAT scales from the weights inside the graph
(ai8x.py calc_out_shift / calc_weight_scale / calc_out_scale / quantize_weight / clamp_weight:
Abs → ReduceMax → Reciprocal → Mul → Log → Div → Floor → Clip → Neg → Pow, then Mul, Round, Clip
on the weights). Every node whose inputs are all initializers or Constant outputs is evaluated
here with numpy, in the tensors' own dtype (float32), following the ONNX operator definitions
(onnx/defs: Round is half to even like np.round; ReduceMax keepdims defaults to 1; Clip's min /
max are optional inputs from opset 11). For MODEL.onnx with key KEY (the file name without
".onnx", every character other than [A-Za-z0-9] replaced by "_"), OUT_DIR receives:
    KEY.folded.onnx   the model with those nodes removed and every value they computed that the
                      rest of the graph reads stored as an initializer (unused initializers dropped)
    KEY.folded.txt    the removed nodes' names, one per line (what a plan must fold)
    KEY.stamp         hash of this script and of the model; a matching stamp skips the model
A node of an op type this script does not evaluate stops the folding along its outputs (the
node stays in the graph); the script prints such op types. Exit status 0, or 2 on an error.
"""

import hashlib
import os
import re
import sys
import tempfile

import numpy as np
import onnx
from onnx import helper, numpy_helper


def attr(node, name, default=None):
    for a in node.attribute:
        if a.name == name:
            return helper.get_attribute_value(a)
    return default


def keep(x, like):
    """Results keep the dtype of the first input (numpy would promote scalars to float64)."""
    return np.asarray(x).astype(like.dtype, copy=False)


def reduce_max(node, x, *rest):
    axes = attr(node, "axes")
    if rest and rest[0] is not None:  # opset 18 form; ai8x exports are opset 14
        axes = list(rest[0])
    keepdims = bool(attr(node, "keepdims", 1))
    return np.max(x, axis=None if axes is None else tuple(int(a) for a in axes), keepdims=keepdims)


def clip(node, x, lo=None, hi=None):
    if node_opset < 11:
        lo, hi = attr(node, "min"), attr(node, "max")
    y = x
    if lo is not None:
        y = np.maximum(y, np.asarray(lo, dtype=x.dtype))
    if hi is not None:
        y = np.minimum(y, np.asarray(hi, dtype=x.dtype))
    return keep(y, x)


OPS = {
    "Identity": lambda n, x: x,
    "Abs": lambda n, x: np.abs(x),
    "Neg": lambda n, x: np.negative(x),
    "Reciprocal": lambda n, x: keep(np.reciprocal(x), x),
    "Log": lambda n, x: keep(np.log(x), x),
    "Floor": lambda n, x: np.floor(x),
    "Round": lambda n, x: np.round(x),  # half to even, as ONNX Round
    "Mul": lambda n, a, b: keep(np.multiply(a, b), a),
    "Div": lambda n, a, b: keep(np.divide(a, b) if a.dtype.kind == "f" else np.trunc(a / b), a),
    "Add": lambda n, a, b: keep(np.add(a, b), a),
    "Sub": lambda n, a, b: keep(np.subtract(a, b), a),
    "Pow": lambda n, a, b: keep(np.power(a, b.astype(a.dtype)), a),
    "ReduceMax": reduce_max,
    "Clip": clip,
    "Transpose": lambda n, x: np.transpose(x, attr(n, "perm")),
}

node_opset = 0


def fold(model):
    """Returns (folded model, names of the removed nodes, op types left unevaluated)."""
    global node_opset
    node_opset = next((o.version for o in model.opset_import if o.domain in ("", "ai.onnx")), 0)
    g = model.graph
    values = {i.name: numpy_helper.to_array(i) for i in g.initializer}
    removed, kept, unknown = [], [], set()
    for n in g.node:
        if n.op_type == "Constant" and n.domain in ("", "ai.onnx"):
            values[n.output[0]] = numpy_helper.to_array(attr(n, "value"))
            removed.append(n)
            continue
        if n.domain in ("", "ai.onnx") and all(i == "" or i in values for i in n.input):
            fn = OPS.get(n.op_type)
            if fn is None:
                unknown.add(n.op_type)
            else:
                args = [values[i] if i else None for i in n.input]
                values[n.output[0]] = np.asarray(fn(n, *args))
                removed.append(n)
                continue
        kept.append(n)

    read = {i for n in kept for i in n.input} | {o.name for o in g.output}
    out = onnx.ModelProto()
    out.CopyFrom(model)
    del out.graph.node[:]
    out.graph.node.extend(kept)
    del out.graph.initializer[:]
    produced = {o for n in kept for o in n.output}
    for name in sorted(read):
        if name in values and name not in produced:
            out.graph.initializer.append(numpy_helper.from_array(np.ascontiguousarray(values[name]), name))
    # value_info of folded tensors would contradict nothing, but keep only what remains computed.
    live = produced | {i.name for i in out.graph.initializer}
    vi = [v for v in out.graph.value_info if v.name in live]
    del out.graph.value_info[:]
    out.graph.value_info.extend(vi)
    names = [n.name for n in removed if n.op_type != "Constant"]
    return out, names, unknown


def key_of(path):
    base = os.path.basename(path)
    if base.endswith(".onnx"):
        base = base[: -len(".onnx")]
    return re.sub(r"[^A-Za-z0-9]", "_", base)


def digest(path):
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def write_atomic(path, data):
    fd, tmp = tempfile.mkstemp(dir=os.path.dirname(path), prefix=".tmp-")
    with os.fdopen(fd, "wb") as f:
        f.write(data)
    os.chmod(tmp, 0o644)
    os.replace(tmp, path)


def main(argv):
    if len(argv) < 2:
        print(__doc__, file=sys.stderr)
        return 2
    out_dir, models = argv[0], argv[1:]
    os.makedirs(out_dir, exist_ok=True)
    script = digest(os.path.abspath(__file__))
    rc = 0
    for path in models:
        key = key_of(path)
        stamp = f"{script} {digest(path)}\n"
        stamp_path = os.path.join(out_dir, key + ".stamp")
        files = [os.path.join(out_dir, key + s) for s in (".folded.onnx", ".folded.txt")]
        try:
            with open(stamp_path, encoding="utf-8") as f:
                if f.read() == stamp and all(os.path.isfile(p) for p in files):
                    continue
        except OSError:
            pass
        try:
            folded, names, unknown = fold(onnx.load(path))
            onnx.checker.check_model(folded)
        except Exception as e:  # report, continue with the other models
            print(f"ai8x_fold: {path}: {type(e).__name__}: {e}", file=sys.stderr)
            rc = 2
            continue
        write_atomic(files[0], folded.SerializeToString())
        write_atomic(files[1], "".join(n + "\n" for n in names).encode())
        write_atomic(stamp_path, stamp.encode())  # last: it vouches for the files above
        extra = f"; not evaluated: {' '.join(sorted(unknown))}" if unknown else ""
        print(f"ai8x_fold: {key}: {len(names)} nodes folded{extra}", file=sys.stderr)
    return rc


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
