"""kiln_client: Python client of kilnd (proto/kiln/v1). See the README section "Python client".

    from kiln_client import Client, KilnError
    with Client("127.0.0.1:50051") as kiln:
        model = kiln.upload("model.onnx").model_id
        run = kiln.run(model, {"input": x}, backend="tt-emu", precision={"math_fidelity": "HiFi2"})
        run.outputs["output"], run.passed, [(l.name, l.pcc, l.passed) for l in run.layers]
        advice = kiln.advise(model, {"input": x}, target_pcc=0.99, space=["fidelity", "weights"])
        {l.name: l.config for l in advice.layers}   # layer_precision for kiln.run

The import name is kiln_client, not kiln: PyPI's `kiln` is an unrelated package, and protoc run
on proto/kiln/v1 by hand makes a top-level `kiln` package this one must not shadow (the stubs
here live under kiln_client._proto). The generated message modules are re-exported
(compile_pb2, device_pb2, job_pb2, model_pb2) for building messages such as a Precision.

__version__ is the Kiln version (CMakeLists.txt `project(kiln VERSION ...)`, the kiln_version
kilnd reports) the stubs were built with; API_PACKAGE is the proto package they speak.
"""
from ._client import Client, CompileResult, RunResult, UploadResult
from ._errors import KilnError
from ._proto.kiln.v1 import compile_pb2, device_pb2, job_pb2, model_pb2
from ._version import __version__

API_PACKAGE: str = device_pb2.DESCRIPTOR.package  # "kiln.v1"

__all__ = ["API_PACKAGE", "Client", "CompileResult", "KilnError", "RunResult", "UploadResult", "__version__",
           "compile_pb2", "device_pb2", "job_pb2", "model_pb2"]
