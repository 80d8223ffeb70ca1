"""The one exception type of the client: every failed call, local or remote, is a KilnError."""
from __future__ import annotations

import grpc

from ._proto.google.rpc import status_pb2

# Trailer that carries a google.rpc.Status with the long form of a message kilnd had to cut to
# 512 bytes (the "Every error's grpc-message ..." paragraph of each proto/kiln/v1/*.proto header).
_DETAILS_KEY = "grpc-status-details-bin"


class KilnError(Exception):
    """A failed call: `code` is the gRPC status code, `message` the server's message (its long
    form from grpc-status-details-bin when the server cut the short one). Errors found before
    anything is sent (an unreadable file, a dtype the API has no name for, an unknown precision
    value) carry INVALID_ARGUMENT or NOT_FOUND, as the server would answer them."""

    code: grpc.StatusCode
    message: str

    def __init__(self, code: grpc.StatusCode, message: str) -> None:
        super().__init__(f"{code.name}: {message}")
        self.code = code
        self.message = message

    def __reduce__(self) -> tuple:
        # Picklable (multiprocessing, e.g. a DataLoader worker): the default would call
        # KilnError("CODE: message") without the code.
        return (type(self), (self.code, self.message))

    @classmethod
    def from_rpc_error(cls, error: grpc.RpcError) -> "KilnError":
        code = error.code() if hasattr(error, "code") else None
        if not isinstance(code, grpc.StatusCode):
            return cls(grpc.StatusCode.UNKNOWN, str(error))
        message = (error.details() if hasattr(error, "details") else None) or ""
        trailers = error.trailing_metadata() if hasattr(error, "trailing_metadata") else None
        for key, value in trailers or ():
            if key == _DETAILS_KEY and isinstance(value, bytes):
                try:
                    status = status_pb2.Status.FromString(value)
                except Exception:  # a malformed trailer: keep the short message
                    continue
                if status.message and status.code == code.value[0]:
                    message = status.message
        return cls(code, message)
