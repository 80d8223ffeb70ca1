"""kiln_client against live kilnd processes (run by run_client_test.py inside the venv it
installed the client into). Models and expected outputs come from tests/data: conv-cases (the
C++ device tests' cases, with their torch float64 expected outputs and manifest tolerances) and
ai8x (the MNIST ai85net5 export and ai8x-synthesis' own network YAML for it).

Environment: KILND (the binary), KILN_SOURCE (the repository), KILN_VERSION (CMake's
PROJECT_VERSION).
"""
import hashlib
import json
import os
import re
import select
import shutil
import subprocess
import tempfile
import threading
import time
import unittest
from pathlib import Path
from typing import Optional

import grpc
import numpy as np

import kiln_client
from kiln_client import Client, KilnError, device_pb2, job_pb2

SOURCE = Path(os.environ["KILN_SOURCE"])
CASES = SOURCE / "tests/data/conv-cases"
AI8X = SOURCE / "tests/data/ai8x"
MANIFEST = {c["name"]: c for c in json.loads((CASES / "manifest.json").read_text())["cases"]}


class Kilnd:
    """A kilnd child process on free ports; its first stdout line names them."""

    def __init__(self, *extra: str, listen: str = "127.0.0.1:0", directory: Optional[str] = None) -> None:
        self.dir = directory or tempfile.mkdtemp(prefix="kiln-python-test-")
        self.log_path = os.path.join(self.dir, "kilnd.log")
        args = [os.environ["KILND"], "--listen", listen, "--metrics-listen", "127.0.0.1:0",
                "--data-dir", os.path.join(self.dir, "data"), "--shutdown-grace", "2", "--log-level", "warn", *extra]
        with open(self.log_path, "wb") as log:
            self.proc = subprocess.Popen(args, stdout=subprocess.PIPE, stderr=log)
        ready, _, _ = select.select([self.proc.stdout], [], [], 20)
        line = self.proc.stdout.readline().decode() if ready else ""
        m = re.match(r"kilnd listening grpc=(\S+) metrics=(\S+)", line)
        if not m:
            self.proc.kill()
            raise RuntimeError(f"kilnd did not start: {line!r}; log: {Path(self.log_path).read_text()[-2000:]}")
        self.address = m.group(1)
        self.metrics = m.group(2)
        self.drain = threading.Thread(target=self.proc.stdout.read, daemon=True)  # keep the pipe drained
        self.drain.start()

    def stop(self, keep: bool = False) -> int:
        """SIGTERM, then the exit code; the data dir is removed unless `keep` (a restart)."""
        self.proc.terminate()
        try:
            code = self.proc.wait(30)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            code = -9
        self.drain.join(5)
        self.proc.stdout.close()
        if not keep:
            shutil.rmtree(self.dir, ignore_errors=True)
        return code


SERVER: Optional[Kilnd] = None


def setUpModule() -> None:
    global SERVER
    SERVER = Kilnd("--devices", "tt-emu:1,reference:1")


def tearDownModule() -> None:
    if SERVER is not None:
        assert SERVER.stop() == 0, "kilnd did not exit cleanly"


def case_input(name: str) -> np.ndarray:
    return np.load(CASES / MANIFEST[name]["inputs"][0]["file"])


def pcc(a: np.ndarray, b: np.ndarray) -> float:
    return float(np.corrcoef(a.astype(np.float64).ravel(), b.astype(np.float64).ravel())[0, 1])


class Base(unittest.TestCase):
    def setUp(self) -> None:
        self.kiln = Client(SERVER.address, client_id="python-test")
        self.addCleanup(self.kiln.close)

    def assertKilnError(self, code: grpc.StatusCode, fn, *args, contains: str = "", **kwargs) -> KilnError:
        with self.assertRaises(KilnError) as ctx:
            fn(*args, **kwargs)
        self.assertEqual(ctx.exception.code, code, ctx.exception.message)
        self.assertIn(contains, ctx.exception.message)
        self.assertTrue(str(ctx.exception).startswith(code.name + ": "))
        return ctx.exception

    def upload_case(self, name: str) -> str:
        return self.kiln.upload(CASES / MANIFEST[name]["model"], name).model_id


class VersionTest(Base):
    def test_client_version_is_the_project_and_server_version(self) -> None:
        self.assertEqual(kiln_client.__version__, os.environ["KILN_VERSION"])
        self.assertEqual(kiln_client.API_PACKAGE, "kiln.v1")
        model = self.upload_case("conv_relu")
        run = self.kiln.run(model, backend="reference", skip_reference=True)
        self.assertEqual(run.kiln_version, kiln_client.__version__)


class ModelTest(Base):
    def test_upload_path_then_bytes(self) -> None:
        path = CASES / "sibling_convs.onnx"
        data = path.read_bytes()
        first = self.kiln.upload(path)
        self.assertEqual(first.model_id, hashlib.sha256(data).hexdigest())
        self.assertIn("sibling_convs", first.model.names)  # the file's stem, as `kiln upload`
        sent = uploaded_bytes()
        again = self.kiln.upload(data, "sibling-again")
        self.assertEqual(again.model_id, first.model_id)
        self.assertTrue(again.already_stored)
        self.assertEqual(uploaded_bytes(), sent)  # stored bytes are only named, never sent again
        self.assertEqual(self.kiln.upload(path).model_id, first.model_id)
        self.assertEqual(uploaded_bytes(), sent)
        self.assertEqual(sorted(self.kiln.model("sibling-again").names), ["sibling-again", "sibling_convs"])
        self.assertEqual(list(self.kiln.model(first.model_id).outputs), ["Y1", "Y2"])
        self.assertEqual(self.kiln.model(first.model_id[:8]).model_id, first.model_id)  # an id prefix
        listed = {m.model_id: m for m in self.kiln.models()}
        self.assertEqual(sorted(listed[first.model_id].names), ["sibling-again", "sibling_convs"])

    def test_upload_errors(self) -> None:
        self.assertKilnError(grpc.StatusCode.INVALID_ARGUMENT, self.kiln.upload, b"\x08\x07", contains="needs a name")
        self.assertKilnError(grpc.StatusCode.NOT_FOUND, self.kiln.upload, CASES / "no-such.onnx", contains="no-such.onnx")
        self.assertKilnError(grpc.StatusCode.INVALID_ARGUMENT, self.kiln.upload, b"not an onnx model", "junk")
        self.assertKilnError(grpc.StatusCode.NOT_FOUND, self.kiln.model, "no-such-model")


def uploaded_bytes() -> float:
    """kiln_upload_bytes_total of the module's kilnd: model bytes it received."""
    import urllib.request
    assert SERVER is not None
    text = urllib.request.urlopen(f"http://{SERVER.metrics}/metrics", timeout=10).read().decode()
    m = re.search(r"^kiln_upload_bytes_total (\S+)$", text, re.M)
    assert m, "kiln_upload_bytes_total missing from /metrics"
    return float(m.group(1))


def yaml_layers(text: str) -> list[dict[str, str]]:
    """The `layers:` list of an izer network YAML as key -> value text (a flat list of maps)."""
    body = text.split("\nlayers:", 1)[1]
    blocks = re.split(r"\n\s*- ", "\n" + body)[1:]
    return [dict(re.findall(r"(?m)^\s*([a-z_]+):[ \t]*([^#\n]*?)[ \t]*(?:#.*)?$", b)) for b in blocks]


class CompileTest(Base):
    MODEL = AI8X / "models/mnist-ai85net5.qat.onnx"
    # ai8x-synthesis' network description for this network (networks/mnist-chw-ai85.yaml).
    UPSTREAM = yaml_layers((AI8X / "networks/mnist-chw-ai85.yaml").read_text())
    KEYS = ("op", "pad", "activate", "max_pool", "avg_pool", "pool_stride", "flatten")

    def shape(self, layers: list[dict[str, str]]) -> list[dict[str, str]]:
        # The izer reads op: mlp, fc and linear alike.
        return [{k: ("linear" if k == "op" and l[k] in ("mlp", "fc") else l[k]) for k in self.KEYS if k in l}
                for l in layers]

    def test_compile_stored_model(self) -> None:
        self.kiln.upload(self.MODEL, "mnist")
        r = self.kiln.compile_ai8x("mnist", "MAX78000", "ai85net5", "MNIST")
        self.assertTrue(r.ok, [d.message for d in r.diagnostics])
        self.assertIn("\narch: ai85net5\n", r.yaml)
        self.assertIn("\ndataset: MNIST\n", r.yaml)
        self.assertEqual(len(self.UPSTREAM), 5)
        # Layer for layer what ai8x-synthesis ships: 4 convs with their pads, pools and ReLUs, then the linear.
        self.assertEqual(self.shape(yaml_layers(r.yaml)), self.shape(self.UPSTREAM))
        self.assertEqual(len(r.layers), 5)
        self.assertEqual([l.index for l in r.layers], [0, 1, 2, 3, 4])
        self.assertEqual(r.layers[0].processors, 0x1)  # one input channel (CHW)
        self.assertEqual(r.layers[0].in_channels, 1)
        self.assertEqual(r.layers[-1].out_channels, 10)  # MNIST's ten classes
        self.assertFalse([d for d in r.diagnostics if d.severity == kiln_client.compile_pb2.ERROR])
        self.assertTrue(r.izer_command[0].endswith("ai8xize.py"), r.izer_command)
        i = r.izer_command.index("--device")
        self.assertEqual(r.izer_command[i + 1], "MAX78000")
        self.assertEqual(r.model_id, hashlib.sha256(self.MODEL.read_bytes()).hexdigest())

    def test_inline_bytes_device_and_overrides(self) -> None:
        r = self.kiln.compile_ai8x(self.MODEL, "ai87", "ai85net5", "MNIST")  # a Path: sent inline
        self.assertTrue(r.ok, [d.message for d in r.diagnostics])
        self.assertEqual(r.response.resolved_options.device, kiln_client.compile_pb2.MAX78002)
        self.assertEqual(yaml_layers(r.yaml)[-1].get("output_width"), "32")
        narrow = self.kiln.compile_ai8x(self.MODEL.read_bytes(), "MAX78002", "ai85net5", "MNIST",
                                        {"last.output_width": 8})
        self.assertIn(yaml_layers(narrow.yaml)[-1].get("output_width"), (None, "8"))
        self.assertKilnError(grpc.StatusCode.INVALID_ARGUMENT, self.kiln.compile_ai8x, self.MODEL, "MAX78000",
                             "ai85net5", "MNIST", {"0.no_such_key": 1}, contains="no_such_key")
        self.assertKilnError(grpc.StatusCode.INVALID_ARGUMENT, self.kiln.compile_ai8x, self.MODEL, "MAX99999")
        # kilnd cuts grpc-message at 512 bytes; the exception carries the long form from
        # grpc-status-details-bin (at most 3 KiB).
        e = self.assertKilnError(grpc.StatusCode.INVALID_ARGUMENT, self.kiln.compile_ai8x, self.MODEL, "MAX78000",
                                 "ai85net5", "MNIST", {"L" * 3000 + ".output_width": 8}, contains="L" * 1000)
        self.assertGreater(len(e.message), 2048)
        self.assertLessEqual(len(e.message), 3072)
        self.assertKilnError(grpc.StatusCode.NOT_FOUND, self.kiln.compile_ai8x, "no-such-model")


class RunTest(Base):
    def setUp(self) -> None:
        super().setUp()
        self.model = self.upload_case("sibling_convs")
        self.x = case_input("sibling_convs")  # float32 [1, 4, 8, 8]
        self.ref = self.kiln.run(self.model, {"X": self.x}, backend="reference")

    def test_reference_matches_the_expected_outputs(self) -> None:
        c = MANIFEST["sibling_convs"]
        tol = c["tolerance"]["fp32_reference"]
        self.assertEqual(sorted(self.ref.outputs), ["Y1", "Y2"])
        for out in c["outputs"]:
            got = self.ref.outputs[out["name"]]
            expected = np.load(CASES / out["file"])
            self.assertEqual(got.shape, tuple(out["shape"]))
            self.assertEqual(got.dtype, np.float32)
            self.assertTrue(got.flags.c_contiguous and got.flags.writeable)
            np.testing.assert_allclose(got, expected, rtol=tol["rtol"], atol=tol["atol"])
        self.assertEqual(self.ref.backend, "reference")
        self.assertTrue(self.ref.passed)
        self.assertGreaterEqual(len(self.ref.layers), 2)
        self.assertEqual(self.ref.response.outputs[0].raw_data, b"")  # the bytes live in the arrays only

    def test_any_dtype_and_layout_gives_the_same_run(self) -> None:
        x = self.x
        strided = np.zeros((1, 4, 8, 16), dtype=np.float32)
        strided[..., ::2] = x
        variants = {
            "float64": x.astype(np.float64),  # sent as FP64, converted to the model's float32
            "big-endian": x.astype(">f4"),
            "fortran": np.asfortranarray(x),
            "strided view": strided[..., ::2],
            "transposed view": np.ascontiguousarray(x.transpose(0, 1, 3, 2)).transpose(0, 1, 3, 2),
        }
        for what, v in variants.items():
            with self.subTest(what):
                self.assertTrue(what in ("float64", "big-endian") or not v.flags.c_contiguous)
                run = self.kiln.run(self.model, {"X": v}, backend="reference")
                for name in ("Y1", "Y2"):
                    np.testing.assert_array_equal(run.outputs[name], self.ref.outputs[name])
        # float16 is rounded once, on this side: the same as running the rounded float32 values.
        half = self.kiln.run(self.model, {"X": x.astype(np.float16)}, backend="reference")
        rounded = self.kiln.run(self.model, {"X": x.astype(np.float16).astype(np.float32)}, backend="reference")
        np.testing.assert_array_equal(half.outputs["Y1"], rounded.outputs["Y1"])
        self.assertFalse(np.array_equal(half.outputs["Y1"], self.ref.outputs["Y1"]))

    def test_tt_emu_against_the_reference(self) -> None:
        precision = {"math_fidelity": "HiFi2", "weights_dtype": "bfloat8_b"}
        emu = self.kiln.run(self.model, {"X": self.x}, backend="tt-emu", precision=precision, mode="per_layer")
        self.assertEqual(emu.backend, "tt-emu")
        self.assertEqual(emu.device, "tt-emu:0")
        self.assertEqual(emu.response.precision.math_fidelity, device_pb2.HIFI2)
        self.assertEqual(emu.response.precision.weights_dtype, device_pb2.BFLOAT8_B)
        self.assertIn("HiFi2", emu.resolved_precision)
        for name in ("Y1", "Y2"):
            p = pcc(emu.outputs[name], self.ref.outputs[name])
            self.assertGreater(p, 0.99, name)
            self.assertLess(p, 1.0, name)  # bf16 / bfp8 arithmetic, not fp32
        convs = [l for l in emu.layers if l.op == "conv2d"]
        self.assertEqual(len(convs), 2)
        for l in emu.layers:
            self.assertEqual(l.passed, getattr(l, "pass"), l.name)  # `l.pass` is a Python syntax error
        for l in convs:
            self.assertTrue(l.compared)
            self.assertGreater(l.pcc, l.pcc_threshold)
            self.assertGreater(l.pcc_threshold, 0.9)
            self.assertTrue(l.passed)
        self.assertTrue(emu.passed)
        self.assertEqual(emu.passed, getattr(emu.response, "pass"))
        report_only = self.kiln.run(self.model, {"X": self.x}, backend="tt-emu", omit_outputs=True)
        self.assertEqual(report_only.outputs, {})
        self.assertEqual(len(report_only.layers), len(emu.layers))

    def test_layer_precision(self) -> None:
        base = self.kiln.run(self.model, {"X": self.x}, "tt-emu", {"math_fidelity": "HiFi4"})
        convs = [l.name for l in base.layers if l.op == "conv2d"]
        self.assertEqual(len(convs), 2)
        low, other = convs
        mixed = self.kiln.run(self.model, {"X": self.x}, "tt-emu", {"math_fidelity": "HiFi4"},
                              layer_precision={low: {"math_fidelity": "LoFi", "weights_dtype": "bfloat4_b"}})
        by = {l.name: l for l in mixed.layers}
        self.assertTrue(by[low].layer_precision_set)
        self.assertEqual(by[low].precision.math_fidelity, device_pb2.LOFI)
        self.assertEqual(by[low].precision.weights_dtype, device_pb2.BFLOAT4_B)
        self.assertIn("LoFi", by[low].resolved_precision)
        self.assertFalse(by[other].layer_precision_set)
        self.assertEqual(by[other].precision.math_fidelity, device_pb2.HIFI4)
        # Sibling convs of X: the named one's output changes, the other's is bit-identical.
        same = [n for n in ("Y1", "Y2") if np.array_equal(mixed.outputs[n], base.outputs[n])]
        self.assertEqual(len(same), 1)
        self.assertKilnError(grpc.StatusCode.INVALID_ARGUMENT, self.kiln.run, self.model, {"X": self.x}, "tt-emu",
                             layer_precision={"no_such_layer": {"math_fidelity": "LoFi"}}, contains="no_such_layer")
        self.assertKilnError(grpc.StatusCode.INVALID_ARGUMENT, self.kiln.run, self.model, {"X": self.x}, "tt-emu",
                             layer_precision={low: {"no_such_field": 1}}, contains="no_such_field")

    def test_errors_carry_the_grpc_code(self) -> None:
        self.assertKilnError(grpc.StatusCode.NOT_FOUND, self.kiln.run, "no-such-model", contains="no-such-model")
        self.assertKilnError(grpc.StatusCode.NOT_FOUND, self.kiln.run, self.model, backend="no-such-backend")
        # Floating types convert into each other; an integer tensor for a float input does not.
        self.assertKilnError(grpc.StatusCode.INVALID_ARGUMENT, self.kiln.run, self.model,
                             {"X": self.x.astype(np.int32)}, backend="reference", contains="X")
        self.assertKilnError(grpc.StatusCode.INVALID_ARGUMENT, self.kiln.run, self.model,
                             {"X": self.x.astype(np.complex64)}, contains="complex64")
        e = self.assertKilnError(grpc.StatusCode.INVALID_ARGUMENT, self.kiln.run, self.model,
                                 precision={"math_fidelity": "HiFi9"}, contains="hifi2")
        self.assertNotIn("unspecified", e.message)  # only the values a caller can give
        self.assertKilnError(grpc.StatusCode.INVALID_ARGUMENT, self.kiln.run, self.model,
                             precision={"fidelity": "HiFi2"}, contains="math_fidelity")


class TensorTest(unittest.TestCase):
    """The conversions alone, for the dtypes no bundled model takes as input."""

    def test_round_trip_of_every_dtype(self) -> None:
        from kiln_client._tensors import from_tensor, to_tensor
        for dt, name in [(np.bool_, "BOOL"), (np.uint8, "UINT8"), (np.uint16, "UINT16"), (np.uint32, "UINT32"),
                         (np.uint64, "UINT64"), (np.int8, "INT8"), (np.int16, "INT16"), (np.int32, "INT32"),
                         (np.int64, "INT64"), (np.float16, "FP16"), (np.float32, "FP32"), (np.float64, "FP64")]:
            with self.subTest(name):
                a = (np.arange(24).reshape(2, 3, 4) % 2 == 1) if dt is np.bool_ else np.arange(24, dtype=dt).reshape(2, 3, 4)
                view = a.transpose(2, 0, 1)
                t = to_tensor("t", view.astype(view.dtype.newbyteorder(">")) if view.dtype.itemsize > 1 else view)
                self.assertEqual(t.datatype, name)
                self.assertEqual(list(t.shape), [4, 2, 3])
                self.assertEqual(t.raw_data, np.ascontiguousarray(view).astype(view.dtype.newbyteorder("<")).tobytes())
                np.testing.assert_array_equal(from_tensor(t), view)
        bf16 = device_pb2.Tensor(name="b", datatype="BF16", shape=[2], raw_data=np.array([0x3F80, 0xC040], "<u2").tobytes())
        np.testing.assert_array_equal(from_tensor(bf16), np.array([1.0, -3.0], np.float32))
        scalar = to_tensor("s", np.float32(2.5))
        self.assertEqual(list(scalar.shape), [])
        self.assertEqual(from_tensor(scalar).shape, ())


class ErrorTest(unittest.TestCase):
    def test_pickles_with_its_code(self) -> None:
        import pickle
        e = pickle.loads(pickle.dumps(KilnError(grpc.StatusCode.NOT_FOUND, "no model 'x'")))
        self.assertEqual((e.code, e.message, str(e)), (grpc.StatusCode.NOT_FOUND, "no model 'x'", "NOT_FOUND: no model 'x'"))


class AuthAndTlsTest(unittest.TestCase):
    def test_token_over_tls(self) -> None:
        tmp = tempfile.mkdtemp(prefix="kiln-python-tls-")
        self.addCleanup(shutil.rmtree, tmp, True)
        key, cert = os.path.join(tmp, "key.pem"), os.path.join(tmp, "cert.pem")
        subprocess.run(["openssl", "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1",
                        "-nodes", "-days", "1", "-subj", "/CN=localhost",
                        "-addext", "subjectAltName=DNS:localhost,IP:127.0.0.1", "-keyout", key, "-out", cert],
                       check=True, capture_output=True)
        server = Kilnd("--devices", "reference:1", "--token", "s3cret", "--tls-cert", cert, "--tls-key", key)
        try:
            data = (CASES / "conv_relu.onnx").read_bytes()
            for token in (None, "wrong"):
                with Client(server.address, token=token, tls_ca=cert) as kiln:
                    with self.assertRaises(KilnError) as ctx:
                        kiln.upload(data, "conv_relu")
                    self.assertEqual(ctx.exception.code, grpc.StatusCode.UNAUTHENTICATED, ctx.exception.message)
            with Client(server.address, token="s3cret", tls_ca=Path(cert).read_bytes()) as kiln:
                up = kiln.upload(data, "conv_relu")
                self.assertEqual(up.model_id, hashlib.sha256(data).hexdigest())
                run = kiln.run(up.model_id, backend="reference", skip_reference=True)
                self.assertEqual(len(run.outputs), 1)
            with self.assertRaises(KilnError) as ctx:
                Client(server.address, tls_ca=os.path.join(tmp, "missing.pem"))
            self.assertEqual(ctx.exception.code, grpc.StatusCode.INVALID_ARGUMENT)
        finally:
            self.assertEqual(server.stop(), 0)


    def test_mutual_tls(self) -> None:
        """kilnd --tls-client-ca: a certificate from that CA is required, and its CN is the principal."""
        tmp = tempfile.mkdtemp(prefix="kiln-python-mtls-")
        self.addCleanup(shutil.rmtree, tmp, True)
        p = lambda name: os.path.join(tmp, name)  # noqa: E731
        ec = ["-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes"]
        run = lambda *args: subprocess.run(["openssl", *args], check=True, capture_output=True)  # noqa: E731
        run("req", "-x509", *ec, "-days", "1", "-subj", "/CN=localhost",
            "-addext", "subjectAltName=DNS:localhost,IP:127.0.0.1", "-keyout", p("server.key"), "-out", p("server.pem"))
        for ca in ("ca", "other-ca"):
            run("req", "-x509", *ec, "-days", "1", "-subj", f"/CN={ca}", "-keyout", p(f"{ca}.key"), "-out", p(f"{ca}.pem"))
        for name, ca in (("carol", "ca"), ("mallory", "other-ca")):
            run("req", "-new", *ec, "-subj", f"/CN={name}", "-keyout", p(f"{name}.key"), "-out", p(f"{name}.csr"))
            run("x509", "-req", "-in", p(f"{name}.csr"), "-CA", p(f"{ca}.pem"), "-CAkey", p(f"{ca}.key"),
                "-CAcreateserial", "-days", "1", "-out", p(f"{name}.pem"))
        server = Kilnd("--devices", "reference:1", "--tls-cert", p("server.pem"), "--tls-key", p("server.key"),
                       "--tls-client-ca", p("ca.pem"))
        try:
            data = (CASES / "conv_relu.onnx").read_bytes()
            for cert, key in ((None, None), (p("mallory.pem"), p("mallory.key"))):
                with Client(server.address, tls_ca=p("server.pem"), tls_cert=cert, tls_key=key, timeout=10) as kiln:
                    with self.assertRaises(KilnError) as ctx:
                        kiln.upload(data, "conv_relu")
                    self.assertEqual(ctx.exception.code, grpc.StatusCode.UNAVAILABLE, ctx.exception.message)
            with Client(server.address, tls_ca=p("server.pem"), tls_cert=Path(p("carol.pem")).read_bytes(),
                        tls_key=p("carol.key"), client_id="nb1") as kiln:
                up = kiln.upload(data, "conv_relu")
                job = kiln.submit(up.model_id, backend="reference", skip_reference=True)
                self.assertTrue(job.client.startswith("cert:carol"), job.client)
                self.assertIn("nb1", job.client)
                self.assertEqual(kiln.wait(job.job_id).state, job_pb2.SUCCEEDED)
            for kwargs in ({"tls_cert": p("carol.pem")}, {"tls_cert": p("carol.pem"), "tls_key": p("carol.key")}):
                with self.assertRaises(KilnError) as ctx:
                    Client(server.address, tls_ca=None if len(kwargs) == 2 else p("server.pem"), **kwargs)
                self.assertEqual(ctx.exception.code, grpc.StatusCode.INVALID_ARGUMENT)
        finally:
            self.assertEqual(server.stop(), 0)


class JobTest(Base):
    def test_sweep_watch_result(self) -> None:
        model = self.upload_case("sibling_convs")
        x = case_input("sibling_convs")
        sweep = [{"math_fidelity": "LoFi"}, {"math_fidelity": "HiFi4", "weights_dtype": "bfloat16"}]
        job = self.kiln.submit(model, {"X": x}, "tt-emu", sweep=sweep, labels={"suite": "python"})
        self.assertTrue(job.job_id.startswith("j-"))
        self.assertEqual(job.configurations, 2)
        self.assertEqual(dict(job.labels), {"suite": "python"})
        self.assertIn("python-test", job.client)  # x-kiln-client as the sub-key
        events = list(self.kiln.watch(job.job_id))
        self.assertEqual([e.sequence for e in events], list(range(1, len(events) + 1)))
        self.assertEqual(events[0].state_change.state, job_pb2.QUEUED)
        self.assertEqual(events[-1].state_change.state, job_pb2.SUCCEEDED)
        layers = [e.layer for e in events if e.HasField("layer")]
        self.assertEqual(sorted({l.configuration for l in layers}), [0, 1])
        for l in layers:
            self.assertEqual(l.report.passed, getattr(l.report, "pass"))
        results = self.kiln.result(job.job_id)
        self.assertEqual(len(results), 2)
        self.assertEqual([r.configuration for r in results], [0, 1])
        self.assertEqual(results[0].requested_precision.math_fidelity, device_pb2.LOFI)
        self.assertEqual(results[1].response.precision.math_fidelity, device_pb2.HIFI4)
        self.assertEqual(len(layers), len(results[0].layers) + len(results[1].layers))
        # tt-emu is deterministic: the job's outputs are the bits of the same run made directly.
        direct = self.kiln.run(model, {"X": x}, "tt-emu", sweep[1])
        for name in ("Y1", "Y2"):
            np.testing.assert_array_equal(results[1].outputs[name], direct.outputs[name])
        self.assertFalse(np.array_equal(results[0].outputs["Y1"], direct.outputs["Y1"]))  # LoFi differs
        for r in results:
            self.assertEqual(r.passed, getattr(r.response, "pass"))
        report = self.kiln.result(job.job_id, omit_outputs=True)
        self.assertEqual([r.outputs for r in report], [{}, {}])
        self.assertEqual(self.kiln.wait(job.job_id).state, job_pb2.SUCCEEDED)
        self.assertIn(job.job_id, [j.job_id for j in self.kiln.jobs(labels={"suite": "python"})])
        # The same idempotency key returns the first job.
        k1 = self.kiln.submit(model, {"X": x}, "reference", idempotency_key="python-once")
        k2 = self.kiln.submit(model, {"X": x}, "reference", idempotency_key="python-once")
        self.assertEqual(k1.job_id, k2.job_id)

    def test_watch_again_across_a_restart(self) -> None:
        """kilnd stopped and started again on the same address and data dir under a watch: the
        stream ends UNAVAILABLE, watch() opens it again, and the events come in order, none twice,
        to the end of the job's second attempt."""
        first = Kilnd("--devices", "tt-emu:1")
        kiln = Client(first.address, client_id="python-test")
        second: Optional[Kilnd] = None
        try:
            model = kiln.upload(CASES / MANIFEST["unet_small"]["model"], "unet_small").model_id
            sweep = [{"math_fidelity": "LoFi"}, {"math_fidelity": "HiFi4"}] * 32  # outlasts the test
            job = kiln.submit(model, {"input": case_input("unet_small")}, "tt-emu", sweep=sweep)
            events: list = []
            errors: list = []

            def follow() -> None:
                try:
                    events.extend(kiln.watch(job.job_id))
                except KilnError as e:  # reported below
                    errors.append(e)

            watcher = threading.Thread(target=follow)
            watcher.start()
            deadline = time.monotonic() + 60
            while not any(e.HasField("layer") for e in list(events)) and time.monotonic() < deadline:
                time.sleep(0.005)
            self.assertEqual(first.stop(keep=True), 0)
            time.sleep(1.5)  # the client finds nobody there
            second = Kilnd("--devices", "tt-emu:1", listen=first.address, directory=first.dir)
            deadline = time.monotonic() + 60
            while not any(e.HasField("state_change") and e.state_change.attempt == 2 for e in list(events)) \
                    and time.monotonic() < deadline:
                time.sleep(0.02)
            kiln.cancel(job.job_id)  # the watch is open again: the rest of the sweep is not needed
            watcher.join(120)
            self.assertFalse(watcher.is_alive())
            self.assertEqual(errors, [])
            sequences = [e.sequence for e in events]
            self.assertEqual(sequences, sorted(set(sequences)))
            ends = [e.state_change for e in events if e.HasField("state_change")]
            self.assertEqual([(s.state, s.attempt) for s in ends][-1], (job_pb2.CANCELLED, 2))
            # QUEUED once at submission, and again (attempt 1) when the restart re-queued the job.
            self.assertEqual([s.attempt for s in ends if s.state == job_pb2.QUEUED], [0, 1])
            # Nobody at the address: a watch that never opened raises at once.
            nobody = Client("127.0.0.1:1")
            started = time.monotonic()
            with self.assertRaises(KilnError) as ctx:
                list(nobody.watch(job.job_id))
            self.assertEqual(ctx.exception.code, grpc.StatusCode.UNAVAILABLE)
            self.assertLess(time.monotonic() - started, 30)  # not the 60 s window of an opened watch
            nobody.close()
        finally:
            kiln.close()
            if second is not None:
                self.assertEqual(second.stop(), 0)
            else:
                first.stop()

    def test_layer_precision_merges_over_each_sweep_point(self) -> None:
        model = self.upload_case("sibling_convs")
        x = case_input("sibling_convs")
        probe = self.kiln.run(model, {"X": x}, "tt-emu", omit_outputs=True)
        low, other = [l.name for l in probe.layers if l.op == "conv2d"]
        layers = {low: {"weights_dtype": "bfloat4_b"}}
        sweep = [{"math_fidelity": "HiFi4"}, {"math_fidelity": "LoFi"}]
        job = self.kiln.submit(model, {"X": x}, "tt-emu", sweep=sweep, layer_precision=layers)
        self.assertEqual(self.kiln.wait(job.job_id).state, job_pb2.SUCCEEDED)
        results = self.kiln.result(job.job_id)
        self.assertEqual(len(results), 2)
        for r, fidelity in zip(results, (device_pb2.HIFI4, device_pb2.LOFI)):
            by = {l.name: l for l in r.layers}
            self.assertEqual(by[low].precision.math_fidelity, fidelity)  # the point's
            self.assertEqual(by[low].precision.weights_dtype, device_pb2.BFLOAT4_B)  # the layer's
            self.assertTrue(by[low].layer_precision_set)
            self.assertEqual(by[other].precision.math_fidelity, fidelity)
            self.assertNotEqual(by[other].precision.weights_dtype, device_pb2.BFLOAT4_B)
        direct = self.kiln.run(model, {"X": x}, "tt-emu", sweep[1], layer_precision=layers)
        for name in ("Y1", "Y2"):
            np.testing.assert_array_equal(results[1].outputs[name], direct.outputs[name])
        self.assertKilnError(grpc.StatusCode.INVALID_ARGUMENT, self.kiln.submit, model, {"X": x}, "tt-emu",
                             layer_precision={low: {"input_dtype": "bfloat4_b"}}, contains=low)

    def test_advise_job(self) -> None:
        """SubmitAdvise through advise(): the answer names every conv with a config the run takes as
        is, its steps are events, and a malformed request is refused at submission."""
        model = self.upload_case("sibling_convs")
        x = case_input("sibling_convs")
        answer = self.kiln.advise(model, {"X": x}, target_pcc=0.99, space=["fidelity"], max_refine_runs=2, seed=3,
                                  labels={"suite": "python-advise"})
        self.assertEqual(list(answer.space), ["fidelity"])
        self.assertEqual(answer.seed, 3)
        self.assertEqual(len(answer.input_sha256), 1)
        self.assertEqual(len(answer.model_sha256), 64)
        self.assertTrue(answer.target_met)
        self.assertFalse(answer.partial)
        self.assertGreaterEqual(answer.network_pcc, 0.99)
        self.assertLessEqual(answer.relative_cost, 1.0)
        self.assertGreater(answer.network_runs, 0)
        probe = self.kiln.run(model, {"X": x}, "tt-emu", omit_outputs=True)
        convs = [l.name for l in probe.layers if l.op == "conv2d"]
        self.assertEqual([l.name for l in answer.layers], convs)
        for l in answer.layers:
            self.assertNotEqual(l.config.math_fidelity, device_pb2.MATH_FIDELITY_UNSPECIFIED)
            self.assertEqual(l.config.weights_dtype, device_pb2.BFLOAT16)  # weights not searched
        # The answer as a run's layer_precision: each conv runs at its advised fidelity.
        run = self.kiln.run(model, {"X": x}, "tt-emu", omit_outputs=True,
                            layer_precision={l.name: l.config for l in answer.layers})
        advised = {l.name: l.config.math_fidelity for l in answer.layers}
        for l in run.layers:
            if l.name in advised:
                self.assertTrue(l.layer_precision_set)
                self.assertEqual(l.precision.math_fidelity, advised[l.name])
        job = next(self.kiln.jobs(labels={"suite": "python-advise"}))
        self.assertEqual(job.kind, job_pb2.JOB_KIND_ADVISE)
        self.assertEqual(job.state, job_pb2.SUCCEEDED)
        self.assertEqual(job.backend, "tt-emu")
        self.assertTrue(job.progress.step)
        steps = [e.advise_step for e in self.kiln.watch(job.job_id) if e.WhichOneof("event") == "advise_step"]
        self.assertTrue(steps[0].startswith("sweep 1/4 HiFi4/bfloat16"), steps)
        self.assertTrue(any(s.startswith("chained ") for s in steps), steps)
        self.assertEqual(self.kiln.advice(job.job_id), answer)
        # Refused at submission, before it takes a place in the queue.
        self.assertKilnError(grpc.StatusCode.INVALID_ARGUMENT, self.kiln.submit_advise, model, {"X": x},
                             space=["fidelity", "speed"], contains="speed")
        self.assertKilnError(grpc.StatusCode.INVALID_ARGUMENT, self.kiln.submit_advise, model, target_pcc=1.5,
                             contains="target_pcc")
        self.assertKilnError(grpc.StatusCode.NOT_FOUND, self.kiln.submit_advise, "no-such-model")
        run_job = self.kiln.submit(model, {"X": x}, "reference")
        self.kiln.wait(run_job.job_id)
        self.assertKilnError(grpc.StatusCode.FAILED_PRECONDITION, self.kiln.advice, run_job.job_id,
                             contains="not an advise job")

    def test_cancel_queued_and_running(self) -> None:
        slow = self.upload_case("unet_small")
        running = self.kiln.submit(slow, backend="tt-emu")
        queued = self.kiln.submit(slow, backend="tt-emu")  # behind it on the one tt-emu device
        deadline = time.monotonic() + 60
        while self.kiln.job(running.job_id).progress.layers_done == 0 and time.monotonic() < deadline:
            time.sleep(0.01)
        self.assertEqual(self.kiln.cancel(queued.job_id).state, job_pb2.CANCELLED)  # at once
        self.kiln.cancel(running.job_id)
        end = self.kiln.wait(running.job_id)
        self.assertEqual(end.state, job_pb2.CANCELLED)
        self.assertEqual(end.error.code, grpc.StatusCode.CANCELLED.value[0])
        self.assertLess(end.progress.layers_done, end.progress.layers_total)  # stopped between layers
        self.assertKilnError(grpc.StatusCode.FAILED_PRECONDITION, self.kiln.result, running.job_id)
        # A sweep cancelled after some configurations: result() refuses it, naming the end, and
        # partial=True returns the finished configurations (the server streams them).
        sweep = self.kiln.submit(slow, backend="tt-emu",
                                 sweep=[{"math_fidelity": "LoFi" if i % 2 else "HiFi4"} for i in range(32)])
        deadline = time.monotonic() + 60
        while self.kiln.job(sweep.job_id).progress.configurations_done == 0 and time.monotonic() < deadline:
            time.sleep(0.002)
        self.kiln.cancel(sweep.job_id)
        end = self.kiln.wait(sweep.job_id)
        self.assertEqual(end.state, job_pb2.CANCELLED, "the sweep finished before the cancel")
        self.assertKilnError(grpc.StatusCode.FAILED_PRECONDITION, self.kiln.result, sweep.job_id,
                             contains=f"ended CANCELLED (cancelled by a client) after {end.progress.configurations_done} of 32")
        self.assertEqual(len(self.kiln.result(sweep.job_id, omit_outputs=True, partial=True)),
                         end.progress.configurations_done)
        self.assertKilnError(grpc.StatusCode.NOT_FOUND, self.kiln.job, "j-nosuchjob")
        with self.assertRaises(KilnError) as ctx:
            list(self.kiln.watch("j-nosuchjob"))
        self.assertEqual(ctx.exception.code, grpc.StatusCode.NOT_FOUND)


if __name__ == "__main__":
    unittest.main()
