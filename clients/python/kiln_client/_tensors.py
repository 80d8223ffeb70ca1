"""numpy arrays <-> kiln.v1.Tensor (proto/kiln/v1/device.proto): KServe-v2 datatype names, raw
little-endian bytes, row-major. Any layout goes in (Fortran order, strided views, big-endian
dtypes): the bytes are written in C order, little-endian. The server converts floating inputs to
the element type the model declares (so float64 and float16 are sent as they are); other
mismatches are its INVALID_ARGUMENT."""
from __future__ import annotations

from typing import Any

import grpc
import numpy as np

from ._errors import KilnError
from ._proto.kiln.v1 import device_pb2

# (numpy kind, itemsize) -> KServe v2 datatype, and back.
_KSERVE: dict[tuple[str, int], str] = {
    ("b", 1): "BOOL",
    ("u", 1): "UINT8", ("u", 2): "UINT16", ("u", 4): "UINT32", ("u", 8): "UINT64",
    ("i", 1): "INT8", ("i", 2): "INT16", ("i", 4): "INT32", ("i", 8): "INT64",
    ("f", 2): "FP16", ("f", 4): "FP32", ("f", 8): "FP64",
}
_NUMPY: dict[str, np.dtype] = {name: np.dtype(f"<{kind}{size}") if kind != "b" else np.dtype(np.bool_)
                               for (kind, size), name in _KSERVE.items()}


def to_tensor(name: str, value: Any) -> device_pb2.Tensor:
    """One input tensor. INVALID_ARGUMENT KilnError for dtypes the API has no name for (complex,
    strings, objects, datetimes, long double)."""
    arr = np.asarray(value)
    dt = arr.dtype
    if dt.name == "bfloat16" and dt.itemsize == 2:  # ml_dtypes / TensorFlow's bfloat16
        bits = np.ascontiguousarray(arr).view(np.uint16).astype("<u2", copy=False)
        return device_pb2.Tensor(name=name, datatype="BF16", shape=list(arr.shape), raw_data=bits.tobytes())
    kserve = _KSERVE.get((dt.kind, dt.itemsize))
    if kserve is None:
        raise KilnError(grpc.StatusCode.INVALID_ARGUMENT,
                        f"input '{name}': numpy dtype {dt} has no kiln.v1 datatype (bool, int8..int64, "
                        "uint8..uint64, float16, float32, float64, bfloat16)")
    little = dt.newbyteorder("<")
    if dt != little:
        arr = arr.astype(little)
    return device_pb2.Tensor(name=name, datatype=kserve, shape=[int(d) for d in arr.shape],
                             raw_data=arr.tobytes(order="C"))


def from_tensor(t: device_pb2.Tensor, raw: bytes | None = None) -> np.ndarray:
    """An output as a writable, C-contiguous array in native byte order. BF16 (which numpy has
    no dtype for) comes back as float32, exactly (bf16 is the top half of an fp32)."""
    data = t.raw_data if raw is None else raw
    shape = tuple(int(d) for d in t.shape)
    count = int(np.prod(shape, dtype=np.int64)) if shape else 1
    datatype = t.datatype or "FP32"
    if datatype == "BF16":
        _check_size(t, len(data), count * 2)
        bits = np.frombuffer(data, dtype="<u2").astype(np.uint32) << 16
        return bits.view(np.float32).reshape(shape)
    dt = _NUMPY.get(datatype)
    if dt is None:
        raise KilnError(grpc.StatusCode.UNKNOWN, f"output '{t.name}': unknown datatype '{datatype}'")
    _check_size(t, len(data), count * dt.itemsize)
    return np.frombuffer(data, dtype=dt).reshape(shape).astype(dt.newbyteorder("="), copy=True)


def _check_size(t: device_pb2.Tensor, got: int, want: int) -> None:
    if got != want:
        raise KilnError(grpc.StatusCode.DATA_LOSS,
                        f"output '{t.name}' ({t.datatype} {list(t.shape)}) has {got} bytes, expected {want}")
