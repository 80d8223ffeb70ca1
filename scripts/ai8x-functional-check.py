#!/usr/bin/python3
"""Functional self-check of Kiln's ai8x YAML: does the network the izer builds from it compute,
bit for bit, what ai8x-training's quantized simulation of the PyTorch model computes?

For every qat model of tests/data/ai8x/models/manifest.json and factories.json (or the names given):
  1. Kiln compiles the ONNX export (build/tests/ai8x/ai8x_compile_tool) to a network YAML and the
     izer flags it needs (--fifo, ...).
  2. Weights: the quantized checkpoint of the training checkpoint the export was made from
     (ai8x-synthesis trained/<name>-q.pth.tar) where the checkout has it; otherwise the model is
     built untrained (seed 0), BN folded and QAT initiated with the export's policy (as the export
     was), saved, and quantized with ai8x-synthesis quantize.py (cached).
  3. The izer (ai8x-synthesis izer.izer.main, in process) runs on Kiln's YAML with that checkpoint
     and one seeded random int8 sample; the layer functions izer.backend.max7800x calls
     (conv2d_layer, conv1d_layer, convtranspose2d_layer, passthrough_layer, eltwise_layer,
     pooling_layer) are wrapped to keep each layer's output of the izer's simulation.
  4. ai8x-training simulates the same model (ai8x.set_device(dev, simulate=True), weight/bias 8-bit
     QAT mode as train.py -8, BN folded, the same checkpoint via load_state_dict +
     ai8x.update_model) on the same sample; a forward hook keeps each module's output. Biases are
     given as the chip holds them (izer/checkpoint.py: floor(bias / 2^(bits-1)), shifted back):
     ai8x-training's simulation would add the unrounded checkpoint bias.
  5. Every weight layer of the YAML (conv/linear, matched to its module by name) and the network
     output are compared bit for bit. Layers Kiln left to the host (AI8X_HOST_TAIL) are not in the
     YAML: the host tail is then computed from the izer's last output as the note says
     (y = W x + b, floor(y / 128 + 0.5), 16-bit clamp) and compared with the model's output.
Prints one line per model, `PASS`, `FAIL <first differing layer ...>`, `LIMIT <diagnostic>` (a
model that genuinely exceeds the chip, refused with only the codes its factories.json `limit` names), or
`SKIP <why>`, then a table. Exit 0 when nothing failed.

The checkouts are not part of the repository (and not in CI): the script reads them from
$AI8X_ORACLE_DIR (subfolders syn = ai8x-synthesis, trn = ai8x-training, dist = distiller, as
tools/ai8x-oracle/setup.sh lays them out) or $AI8X_SYN / $AI8X_TRN / $AI8X_DIST, and prints
SKIP and exits 0 when they are absent. Python: Debian's /usr/bin/python3 with python3-torch,
python3-numpy, python3-yaml (and what the izer imports: scripts/install-deps.sh does not install
these; setup.sh of the oracle does).

Usage: scripts/ai8x-functional-check.py [--build BUILD] [--work DIR] [--data DIR] [-v] [NAME ...]
"""
import argparse
import contextlib
import importlib.util
import io
import json
import os
import re
import subprocess
import sys
import tempfile
import time
import types

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DATA = os.path.join(ROOT, 'tests', 'data', 'ai8x', 'models')
ORACLE = os.environ.get('AI8X_ORACLE_DIR', '')
SYN = os.environ.get('AI8X_SYN', os.path.join(ORACLE, 'syn') if ORACLE else '')
TRN = os.environ.get('AI8X_TRN', os.path.join(ORACLE, 'trn') if ORACLE else '')
DIST = os.environ.get('AI8X_DIST', os.path.join(ORACLE, 'dist') if ORACLE else '')
DEV = {'MAX78000': 85, 'MAX78002': 87}
SIM_FUNCS = ['conv2d_layer', 'conv1d_layer', 'convtranspose2d_layer', 'passthrough_layer',
             'eltwise_layer', 'pooling_layer']
WEIGHT_FUNCS = {'conv2d_layer', 'conv1d_layer', 'convtranspose2d_layer'}


def checkouts_missing():
    for what, path, probe in (('ai8x-synthesis', SYN, 'ai8xize.py'), ('ai8x-training', TRN, 'ai8x.py'),
                              ('distiller', DIST, 'distiller')):
        if not path or not os.path.exists(os.path.join(path, probe)):
            return f'no {what} checkout ({probe} not found in {path or "(unset)"}); set AI8X_ORACLE_DIR'
    return None


def training_imports():
    """`import ai8x` and the two distiller modules ai8x-training needs, without installing
    distiller (its package __init__ pulls in a large dependency tree)."""
    if TRN not in sys.path:
        sys.path.insert(0, TRN)
    if 'distiller' in sys.modules:
        return
    pkg = types.ModuleType('distiller')
    pkg.__path__ = [os.path.join(DIST, 'distiller')]
    sys.modules['distiller'] = pkg
    for sub in ('utils',):
        spec = importlib.util.spec_from_file_location('distiller.' + sub,
                                                      os.path.join(DIST, 'distiller', sub + '.py'))
        mod = importlib.util.module_from_spec(spec)
        sys.modules['distiller.' + sub] = mod
        spec.loader.exec_module(mod)
        setattr(pkg, sub, mod)


def create_model(entry, qat_8bit):
    """The factory of models/<file> with the constructor args the export used (train.py
    create_model; with -8 the modules are built with 8-bit weights/bias and quantized
    activations)."""
    path = os.path.join(TRN, entry['model_file'])
    spec = importlib.util.spec_from_file_location('kiln_check_' + os.path.basename(path)[:-3].replace('-', '_'),
                                                  path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    a = dict(entry['args'])
    a['dimensions'] = tuple(a['dimensions'])
    if qat_8bit:
        a.update(weight_bits=8, bias_bits=8, quantize_activation=True)
    return getattr(mod, entry['factory'])(**a)


def quantized_checkpoint(entry, work):
    """(path, note) of the -q checkpoint for the export's weights."""
    import torch  # pylint: disable=import-outside-toplevel
    ck = entry.get('checkpoint')
    if ck:
        q = os.path.join(SYN, ck.split('/', 1)[1].replace('.pth.tar', '-q.pth.tar'))
        if os.path.exists(q):
            return q, os.path.basename(q)
    out = os.path.join(work, 'ckpt')
    os.makedirs(out, exist_ok=True)
    raw = os.path.join(out, entry['name'] + '-untrained.pth.tar')
    q = os.path.join(out, entry['name'] + '-untrained-q.pth.tar')
    if not os.path.exists(q):
        training_imports()
        import ai8x  # pylint: disable=import-outside-toplevel
        import parse_qat_yaml  # pylint: disable=import-outside-toplevel
        ai8x.set_device(DEV[entry['device']], False, False, verbose=False)
        torch.manual_seed(0)
        with contextlib.redirect_stdout(io.StringIO()):
            model = create_model(entry, False)
        ai8x.fuse_bn_layers(model)
        policy = parse_qat_yaml.parse(os.path.join(TRN, entry['qat_policy']))
        ai8x.initiate_qat(model, policy)
        torch.save({'epoch': policy['start_epoch'], 'arch': entry['factory'], 'state_dict': model.state_dict(),
                    'extras': {}}, raw)
        p = subprocess.run([sys.executable, 'quantize.py', raw, q, '--device', entry['device']], cwd=SYN,
                           capture_output=True, text=True, check=False)
        if p.returncode != 0 or not os.path.exists(q):
            raise RuntimeError('quantize.py failed: ' + (p.stdout + p.stderr)[-1500:])
    return q, 'untrained (seed 0), quantize.py'


def izer_outputs(yaml_path, ckpt, sample, device, flags, out_dir, verbose):
    """Runs the izer in process; returns ({layer: output array}, izer log)."""
    import numpy as np  # pylint: disable=import-outside-toplevel
    sys.path.insert(0, SYN)
    cwd = os.getcwd()
    os.chdir(SYN)
    from izer import izer  # pylint: disable=import-outside-toplevel
    from izer.backend import max7800x  # pylint: disable=import-outside-toplevel
    captured = {}

    def wrap(name, fn):  # the simulate.py layer functions return (output, output size)
        def wrapped(layer, *args, **kwargs):
            out, size = fn(layer, *args, **kwargs)
            captured.setdefault(layer, []).append((name, np.array(out, copy=True)))
            return out, size
        return wrapped
    for name in SIM_FUNCS:
        setattr(max7800x, name, wrap(name, getattr(max7800x, name)))
    sys.argv = ['ai8xize.py', '--test-dir', out_dir, '--prefix', 'check', '--checkpoint-file', ckpt,
                '--config-file', yaml_path, '--device', device, '--sample-input', sample, '--no-version-check',
                '--timer', '0', '--overwrite'] + flags
    log = io.StringIO()
    rc = 0
    try:
        with contextlib.redirect_stdout(log), contextlib.redirect_stderr(log):
            izer.main()
    except SystemExit as e:
        rc = e.code if isinstance(e.code, int) else 1
    finally:
        os.chdir(cwd)
    if verbose:
        print(log.getvalue())
    return captured, rc, log.getvalue()


def training_outputs(entry, ckpt, sample):
    """({module name: output}, model output) of ai8x-training's quantized simulation."""
    import numpy as np  # pylint: disable=import-outside-toplevel
    import torch  # pylint: disable=import-outside-toplevel
    training_imports()
    import ai8x  # pylint: disable=import-outside-toplevel
    ai8x.set_device(DEV[entry['device']], True, False, verbose=False)
    with contextlib.redirect_stdout(io.StringIO()):
        model = create_model(entry, True)
    ai8x.fuse_bn_layers(model)
    state = torch.load(ckpt, map_location='cpu')['state_dict']
    state = {k[len('module.'):] if k.startswith('module.') else k: v for k, v in state.items()}
    res = model.load_state_dict(state, strict=False)
    missing = [k for k in res.missing_keys if not k.endswith('.shift_quantile')]
    if missing:
        raise RuntimeError(f'checkpoint lacks {len(missing)} keys, e.g. {missing[:3]}')
    # The bias the accelerator holds: ai8x-synthesis izer/checkpoint.py stores
    # floor(bias / 2^(weight_bits-1)) and the hardware adds it back shifted; ai8x-training's
    # simulation adds the checkpoint's bias unrounded. Give the simulation the bias the chip has.
    with torch.no_grad():
        for _, m in model.named_modules():
            if isinstance(m, ai8x.QuantizationAwareModule) and m.op is not None and m.op.bias is not None:
                scale = 2.0 ** (int(m.weight_bits.item() or 8) - 1)
                m.op.bias.copy_(torch.floor(m.op.bias / scale) * scale)
    ai8x.update_model(model)
    model.eval()
    outs = {}
    for name, m in model.named_modules():
        if isinstance(m, (ai8x.QuantizationAwareModule, ai8x.FusedSoftwareLinearReLU)):
            # every call: a module applied several times (shared heads) has one output per call
            m.register_forward_hook(
                lambda _m, _i, o, name=name: outs.setdefault(name, []).append(o.detach().numpy().copy()))
    x = torch.from_numpy(np.load(sample).astype(np.float32)).unsqueeze(0)
    with torch.no_grad():
        y = model(x)
    # The trailing SoftwareLinear modules (the host tail Kiln cuts), as the host computes them.
    tail = [m for _, m in model.named_modules() if isinstance(m, ai8x.FusedSoftwareLinearReLU)]

    def host_tail(acc_out):
        v = torch.from_numpy(np.asarray(acc_out, dtype=np.float32).reshape(1, -1))
        with torch.no_grad():
            for m in tail:
                v = torch.nn.functional.linear(v, m.op.weight, m.op.bias)
                if isinstance(m.activate, torch.nn.ReLU):
                    v = torch.relu(v)
                v = torch.clamp(torch.floor(v / 128 + 0.5), -32768, 32767)
        return v.numpy()
    weight_modules = {n for n, m in model.named_modules()
                      if isinstance(m, ai8x.QuantizationAwareModule) and m.op is not None}
    y = y.detach().numpy() if torch.is_tensor(y) else None  # a tuple (SSD heads): the output layers are compared
    return outs, y, host_tail, weight_modules


def compare(name, izer_out, torch_out):
    a = np.asarray(izer_out).astype(np.int64).reshape(-1)
    b = np.asarray(torch_out).astype(np.float64).reshape(-1)
    if a.size != b.size:
        return f'{name}: {a.size} values in the izer, {b.size} in ai8x-training'
    if not np.array_equal(b, np.round(b)):
        return f'{name}: ai8x-training output is not integral'
    diff = np.nonzero(a != b.astype(np.int64))[0]
    if diff.size:
        i = diff[0]
        return f'{name}: {diff.size}/{a.size} values differ (first at {i}: izer {a[i]}, ai8x-training {int(b[i])})'
    return None


def module_of(name, modules):
    """The ai8x-training module a YAML layer name stands for: the name itself (without `.op`),
    without Kiln's `_N` suffix for a module's N-th further call, or the one module whose dotted path
    contains the name's parts in order (Kiln's names drop containers such as `res_layers`)."""
    candidates = [name, name[:-3] if name.endswith('.op') else name]
    base = re.sub(r'_[0-9]+$', '', name)
    if base != name:
        candidates.append(base)
    for c in candidates:
        if c in modules:
            return c
    for c in candidates:
        parts = c.split('.')
        found = []
        for m in modules:
            mp = m.split('.')
            if mp[-1] != parts[-1]:
                continue
            it = iter(mp)
            if all(p in it for p in parts):
                found.append(m)
        if len(found) == 1:
            return found[0]
    return None


def check_one(entry, args):
    """'PASS ...' / 'FAIL ...' for one manifest entry (run in a child process)."""
    import yaml  # pylint: disable=import-outside-toplevel
    global np  # pylint: disable=global-statement,invalid-name
    import numpy as np  # pylint: disable=import-outside-toplevel,redefined-outer-name
    work = os.path.join(args.work, entry['name'])
    os.makedirs(work, exist_ok=True)
    yaml_path = os.path.join(work, 'kiln.yaml')
    tool = os.path.join(args.build, 'tests', 'ai8x', 'ai8x_compile_tool')
    p = subprocess.run([tool, os.path.join(DATA, entry['file']), entry['device'], entry['factory'],
                        entry['dataset']], capture_output=True, text=True, check=False)
    with open(yaml_path, 'w', encoding='utf-8') as f:
        f.write(p.stdout)
    if args.golden:  # the hand-written YAML instead of Kiln's (to see what the check catches)
        if not entry.get('golden_yaml'):
            return 'SKIP no hand-written YAML'
        text = open(os.path.join(DATA, '..', 'networks', entry['golden_yaml']), encoding='utf-8').read()
        text = re.sub(r'(?m)^arch:.*$', 'arch: ' + entry['factory'], text)  # the izer lints the YAML:
        text = re.sub(r'(?m)^dataset:.*$', 'dataset: ' + entry['dataset'], text)  # keep its layout
        with open(yaml_path, 'w', encoding='utf-8') as f:
            f.write(text)
    if p.returncode != 0:
        errors = [ln for ln in p.stderr.splitlines() if ln.startswith('error ')]
        limit = entry.get('limit') or {}  # the codes of a model beyond the chip (and what Kiln refuses besides)
        allowed = [limit['code']] + limit.get('also', []) if limit else []
        if allowed and errors and all(ln.split()[1] in allowed for ln in errors):
            first = next((ln for ln in errors if ln.split()[1] == limit['code']), errors[0])
            return f'LIMIT {first} (expected: {entry["expect"]})'  # genuinely exceeds the chip
        return 'FAIL Kiln did not compile it: ' + (errors[0] if errors else p.stderr.strip()[-300:])
    flags = []
    for line in p.stderr.splitlines():
        if line.startswith('flags:'):
            words = line.split()[1:]
            flags = [w for i, w in enumerate(words) if w.startswith('--') and w != '--device'
                     and not (i > 0 and words[i - 1] == '--device')]
    host_tail = 'AI8X_HOST_TAIL' in p.stderr
    # AI8X_HOST_OPS: what follows the accelerator is the host's (FaceID-112's L2 normalisation, the
    # SSD heads' transposes and concatenations): the network outputs are then the YAML's output
    # layers (`output: true`, else the last), each compared with its module below.
    host_ops = next((ln.split('compute: ', 1)[-1] for ln in p.stderr.splitlines() if ' AI8X_HOST_OPS ' in ln), None)
    ckpt, note = quantized_checkpoint(entry, args.work)
    sample = os.path.join(work, 'sample.npy')
    shape = tuple(entry['input_shape'])
    rng = np.random.default_rng(0)
    np.save(sample, rng.integers(-128, 128, size=shape, dtype=np.int64), allow_pickle=False)
    captured, rc, log = izer_outputs(yaml_path, ckpt, sample, entry['device'], flags, os.path.join(work, 'izer'),
                                     args.verbose)
    if rc != 0 or 'ERROR' in log:
        err = next((ln for ln in log.splitlines() if 'ERROR' in ln), f'exit {rc}')
        return f'FAIL izer: {err.strip()} [{note}]'
    torch_outs, y, tail, weight_modules = training_outputs(entry, ckpt, sample)
    layers = yaml.safe_load(open(yaml_path, encoding='utf-8'))['layers']
    checked = 0
    compared = set()
    nonzero = ''
    call_of = {}  # module -> YAML layers matched to it so far (the k-th is its k-th call)
    for ll, layer in enumerate(layers):
        calls = captured.get(ll, [])
        weight_calls = [c for c in calls if c[0] in WEIGHT_FUNCS]
        if not weight_calls:
            continue
        if 'name' in layer:
            mod = module_of(layer['name'], torch_outs)
        else:  # hand-written YAMLs name no layers: the k-th weight layer is the k-th weight module run
            weight_mods = [n for n in torch_outs if n in weight_modules]
            mod = weight_mods[checked] if checked < len(weight_mods) else None
        if mod is None:
            return f'FAIL layer {ll} {layer.get("name", "")}: no ai8x-training module of that name'
        k = call_of.get(mod, 0)
        call_of[mod] = k + 1
        if k >= len(torch_outs[mod]):
            return f'FAIL layer {ll} {layer.get("name", "")}: module {mod} runs only {len(torch_outs[mod])} times'
        problem = compare(f'layer {ll} {layer.get("name", mod)}', weight_calls[-1][1], torch_outs[mod][k])
        if problem:
            return f'FAIL {problem} [{note}]'
        checked += 1
        compared.add(ll)
        v = np.asarray(weight_calls[-1][1])
        nonzero = f'{np.count_nonzero(v)}/{v.size} of the last nonzero'  # a zero network proves little
    if host_ops and not host_tail:
        outs = [i for i, layer in enumerate(layers) if layer.get('output')] or [len(layers) - 1]
        missing = [i for i in outs if i not in compared]
        if missing:
            return f'FAIL output layer {missing[0]} is not a weight layer compared with its module [{note}]'
        return (f'PASS {checked} weight layers bit-exact, {len(outs)} of them the network outputs (then the host: '
                f'{host_ops[:60]}) [{note}; {len(layers)} layers; {nonzero}]')
    if y is None:
        return f'FAIL the model returns a tuple but Kiln reports no host ops after the output layers [{note}]'
    last = max(captured)
    final = captured[last][-1][1]
    problem = compare('network output' + (' (accelerator + host tail)' if host_tail else ''),
                      tail(final) if host_tail else final, y)
    if problem:
        return f'FAIL {problem} [{note}]'
    return (f'PASS {checked} weight layers and the network output{" (with the host tail)" if host_tail else ""} '
            f'bit-exact [{note}; {len(layers)} layers; {nonzero}]')


def main():
    global DATA  # pylint: disable=global-statement
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument('--build', default=os.path.join(ROOT, 'build'))
    ap.add_argument('--work', default=os.path.join(tempfile.gettempdir(), 'kiln-ai8x-functional'))
    ap.add_argument('--data', default=DATA,
                    help='folder of the exports and their manifest.json / factories.json (default: the test data; '
                         'another one checks exports kept out of it, e.g. over 8 MB)')
    ap.add_argument('--one', help=argparse.SUPPRESS)
    ap.add_argument('--golden', action='store_true',
                    help="check the hand-written YAML of tests/data/ai8x/networks instead of Kiln's")
    ap.add_argument('-v', '--verbose', action='store_true')
    ap.add_argument('names', nargs='*')
    args = ap.parse_args()
    DATA = os.path.abspath(args.data)
    manifest = []
    for f in ('manifest.json', 'factories.json'):
        if os.path.exists(os.path.join(DATA, f)):
            manifest += json.load(open(os.path.join(DATA, f), encoding='utf-8'))
    entries = [e for e in manifest if e['form'] == 'qat' and e.get('file')]
    if args.one:
        entry = next(e for e in entries if e['name'] == args.one)
        try:
            print(check_one(entry, args))
        except Exception as exc:  # pylint: disable=broad-except
            print(f'FAIL {type(exc).__name__}: {exc}')
        return 0
    missing = checkouts_missing()
    if missing:
        print(f'SKIP ai8x functional check: {missing}')
        return 0
    tool = os.path.join(args.build, 'tests', 'ai8x', 'ai8x_compile_tool')
    if not os.path.exists(tool):
        print(f'SKIP ai8x functional check: no {tool} (build the ai8x_compile_tool target)')
        return 0
    if args.names:
        entries = [e for e in entries if e['name'] in args.names]
    rows = []
    for e in entries:
        t0 = time.time()
        cmd = [sys.executable, os.path.abspath(__file__), '--build', args.build, '--work', args.work, '--data', DATA,
               '--one',
               e['name']] + (['-v'] if args.verbose else []) + (['--golden'] if args.golden else [])
        p = subprocess.run(cmd, capture_output=True, text=True, check=False)
        lines = [ln for ln in p.stdout.splitlines() if ln.startswith(('PASS', 'FAIL', 'LIMIT', 'SKIP'))]
        verdict = lines[-1] if lines else 'FAIL ' + (p.stderr.strip().splitlines() or ['no output'])[-1]
        if args.verbose:
            print(p.stdout)
        print(f'{e["name"]} ({e["device"]}): {verdict} ({time.time() - t0:.0f} s)', flush=True)
        rows.append((e['name'], e['device'], verdict.split()[0]))
    print('\n| model | device | result |\n|---|---|---|')
    for r in rows:
        print(f'| {r[0]} | {r[1]} | {r[2]} |')
    rows = [r for r in rows if r[2] != 'SKIP']
    failed = sum(r[2] == 'FAIL' for r in rows)
    limits = sum(r[2] == 'LIMIT' for r in rows)
    print(f'\n{len(rows) - failed - limits}/{len(rows)} PASS, {limits} beyond the chip (LIMIT: refused with the '
          f'expected diagnostic), {failed} FAIL')
    return 1 if failed else 0


if __name__ == '__main__':
    sys.exit(main())
