"""Client: one gRPC channel to kilnd and thin, typed calls over proto/kiln/v1 (ModelService,
CompileService, DeviceService, JobService). Requests are built as the C++ CLI builds them (cli/):
"authorization: Bearer <token>", x-kiln-client as the optional sub-key of this client's queue
share, uploads in 1 MiB chunks after a header with size and sha256, SubmitRun and SubmitAdvise
retried on RESOURCE_EXHAUSTED / UNAVAILABLE with an idempotency key, precision values spelled as on the
command line. Every failure is a KilnError."""
from __future__ import annotations

import hashlib
import json
import os
import time
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Iterator, Mapping, Optional, Sequence, Union

import grpc
import numpy as np
from google.protobuf import descriptor as _descriptor

from ._errors import KilnError
from ._proto.kiln.v1 import compile_pb2, compile_pb2_grpc, device_pb2, device_pb2_grpc, job_pb2, job_pb2_grpc
from ._proto.kiln.v1 import model_pb2, model_pb2_grpc
from ._tensors import from_tensor, to_tensor
from ._version import __version__

PathOrBytes = Union[str, "os.PathLike[str]", bytes, bytearray, memoryview]
PrecisionLike = Union[Mapping[str, Any], device_pb2.Precision, None]

_CHUNK = 1 << 20  # kiln/v1/model.proto: chunks of at most 1 MiB
# As the CLI's channel (cli/client.cc): a full job queue, and kilnd's limit on streams of stored
# bytes (--max-read-streams), answer RESOURCE_EXHAUSTED with grpc-retry-pushback-ms, which gRPC's
# retry policy honours.
_SERVICE_CONFIG = json.dumps({"methodConfig": [{
    "name": [{"service": "kiln.v1.JobService", "method": "SubmitRun"},
             {"service": "kiln.v1.JobService", "method": "SubmitAdvise"},
             {"service": "kiln.v1.JobService", "method": "GetJobResult"},
             {"service": "kiln.v1.ModelService", "method": "ReadModel"}],
    "retryPolicy": {"maxAttempts": 5, "initialBackoff": "1s", "maxBackoff": "30s", "backoffMultiplier": 2,
                    "retryableStatusCodes": ["RESOURCE_EXHAUSTED", "UNAVAILABLE"]}}]})
_FINISHED = {job_pb2.SUCCEEDED, job_pb2.FAILED, job_pb2.CANCELLED}


@dataclass
class UploadResult:
    model_id: str                 # lowercase hex sha256 of the bytes
    already_stored: bool          # the bytes were in the store before
    replaced_model_id: str        # the model the name pointed at before ("" = none)
    model: model_pb2.Model


@dataclass
class CompileResult:
    """CompileAi8x's answer. ok = no error diagnostics; a model that breaks a hardware rule is an
    answer with ok False, not an exception."""
    ok: bool
    yaml: str
    layers: list[compile_pb2.Ai8xLayer]
    diagnostics: list[compile_pb2.Diagnostic]
    izer_command: list[str]       # argv of the next ai8xize.py run (file names are placeholders)
    izer_flags: list[str]
    resources: compile_pb2.Ai8xResources
    model_id: str
    response: compile_pb2.CompileAi8xResponse


@dataclass
class RunResult:
    """One run's outputs (graph output name -> array) and report. `passed`: every compared layer
    passed its PCC threshold. `response` is the RunConvLayersResponse without the output bytes."""
    outputs: dict[str, np.ndarray]
    layers: list[device_pb2.LayerReport]
    passed: bool
    backend: str
    device: str
    resolved_precision: str
    kiln_version: str
    response: device_pb2.RunConvLayersResponse
    configuration: int = 0                                 # jobs: index of the sweep point
    requested_precision: Optional[device_pb2.Precision] = None  # jobs: the configuration as requested


def _read_pem(value: Union[str, "os.PathLike[str]", bytes], what: str) -> bytes:
    """PEM bytes given as such or as a path; INVALID_ARGUMENT naming the argument when unreadable."""
    if isinstance(value, bytes):
        return value
    try:
        return Path(value).read_bytes()
    except OSError as e:
        raise KilnError(grpc.StatusCode.INVALID_ARGUMENT,
                        f"cannot read {what} file '{os.fspath(value)}': {e.strerror}") from e


class Client:
    """A connection to kilnd at `address` ("host:port").

    token: sent as "authorization: Bearer <token>" (kilnd --token). tls_ca: PEM root
    certificates (a path or the bytes) to verify kilnd's TLS certificate; None = plaintext.
    tls_cert, tls_key: this client's PEM certificate chain and private key (paths or bytes) for
    mutual TLS (kilnd --tls-client-ca); both or neither, and only with tls_ca. kilnd then takes
    the certificate's identity as this client's principal.
    client_id: sent as x-kiln-client, a sub-key that splits this principal's queue share.
    timeout: per-call deadline in seconds (None = none). Use as a context manager or call close().
    """

    def __init__(self, address: str, token: Optional[str] = None,
                 tls_ca: Union[str, "os.PathLike[str]", bytes, None] = None, *,
                 tls_cert: Union[str, "os.PathLike[str]", bytes, None] = None,
                 tls_key: Union[str, "os.PathLike[str]", bytes, None] = None,
                 client_id: Optional[str] = None, timeout: Optional[float] = None,
                 max_message_bytes: int = 256 << 20) -> None:
        options = [("grpc.max_receive_message_length", max_message_bytes),
                   ("grpc.max_send_message_length", max_message_bytes),
                   ("grpc.primary_user_agent", f"kiln-python/{__version__}"),
                   ("grpc.enable_retries", 1),
                   ("grpc.service_config", _SERVICE_CONFIG)]
        if (tls_cert is None) != (tls_key is None):
            raise KilnError(grpc.StatusCode.INVALID_ARGUMENT, "tls_cert and tls_key must be given together")
        if tls_cert is not None and tls_ca is None:
            raise KilnError(grpc.StatusCode.INVALID_ARGUMENT,
                            "tls_cert needs tls_ca (the CA that signed kilnd's certificate)")
        if tls_ca is None:
            self._channel = grpc.insecure_channel(address, options=options)
        else:
            creds = grpc.ssl_channel_credentials(
                root_certificates=_read_pem(tls_ca, "tls_ca"),
                private_key=None if tls_key is None else _read_pem(tls_key, "tls_key"),
                certificate_chain=None if tls_cert is None else _read_pem(tls_cert, "tls_cert"))
            self._channel = grpc.secure_channel(address, creds, options=options)
        self._metadata: list[tuple[str, str]] = []
        if token:
            self._metadata.append(("authorization", "Bearer " + token))
        if client_id:
            self._metadata.append(("x-kiln-client", client_id))
        self._timeout = timeout
        self._models = model_pb2_grpc.ModelServiceStub(self._channel)
        self._compile = compile_pb2_grpc.CompileServiceStub(self._channel)
        self._devices = device_pb2_grpc.DeviceServiceStub(self._channel)
        self._jobs = job_pb2_grpc.JobServiceStub(self._channel)

    def close(self) -> None:
        self._channel.close()

    def __enter__(self) -> "Client":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- calls ---------------------------------------------------------------------------------

    def _unary(self, method: Callable[..., Any], request: Any) -> Any:
        try:
            return method(request, metadata=self._metadata, timeout=self._timeout)
        except grpc.RpcError as e:
            raise KilnError.from_rpc_error(e) from None

    def _stream(self, method: Callable[..., Any], request: Any) -> Iterator[Any]:
        call = method(request, metadata=self._metadata, timeout=self._timeout)
        try:
            for message in call:
                yield message
        except grpc.RpcError as e:
            raise KilnError.from_rpc_error(e) from None
        finally:
            call.cancel()  # a generator closed early ends the stream; a no-op once it ended

    # -- models --------------------------------------------------------------------------------

    def upload(self, model: PathOrBytes, name: Optional[str] = None) -> UploadResult:
        """Stores an ONNX model: a file path (name defaults to the file's stem, as `kiln upload`)
        or the bytes (name required). The same bytes are stored once (already_stored) and never
        sent again: LookupModel first, then only the header when they are stored."""
        if isinstance(model, (bytes, bytearray, memoryview)):
            data = bytes(model)
            if not name:
                raise KilnError(grpc.StatusCode.INVALID_ARGUMENT, "upload of bytes needs a name")
            size, sha = len(data), hashlib.sha256(data).hexdigest()
            chunks: Callable[[], Iterator[bytes]] = lambda: (data[i:i + _CHUNK] for i in range(0, size, _CHUNK))
        else:
            path = os.fspath(model)
            name = name or Path(path).stem
            h = hashlib.sha256()
            try:
                size = os.path.getsize(path)
                with open(path, "rb") as f:
                    for block in iter(lambda: f.read(_CHUNK), b""):
                        h.update(block)
            except OSError as e:
                raise KilnError(grpc.StatusCode.NOT_FOUND, f"cannot open '{path}': {e.strerror}") from e
            sha = h.hexdigest()

            def chunks() -> Iterator[bytes]:
                with open(path, "rb") as f:
                    yield from iter(lambda: f.read(_CHUNK), b"")

        # Before any byte goes out (as `kiln upload`, cli/model_commands.cc): is the name valid, and
        # are these bytes stored? Stored bytes are named by the header alone (kiln/v1/model.proto
        # UploadHeader.sha256); an older kilnd without LookupModel gets the bytes.
        stored = False
        try:
            found = self._models.LookupModel(model_pb2.LookupModelRequest(name=name, sha256=sha),
                                             metadata=self._metadata, timeout=self._timeout)
            stored = found.HasField("by_sha256") and found.by_sha256.size_bytes == size
        except grpc.RpcError as e:
            if e.code() != grpc.StatusCode.UNIMPLEMENTED:
                raise KilnError.from_rpc_error(e) from None

        def requests() -> Iterator[model_pb2.UploadModelRequest]:
            yield model_pb2.UploadModelRequest(header=model_pb2.UploadHeader(name=name, size_bytes=size, sha256=sha))
            if not stored:
                for c in chunks():
                    yield model_pb2.UploadModelRequest(chunk=c)

        resp = self._unary(self._models.UploadModel, requests())
        return UploadResult(model_id=resp.model.model_id, already_stored=resp.already_stored,
                            replaced_model_id=resp.replaced_model_id, model=resp.model)

    def model(self, model: str) -> model_pb2.Model:
        """A stored model's metadata, by id, name or id prefix (8+ hex digits)."""
        return self._unary(self._models.GetModel, model_pb2.GetModelRequest(model_id=model)).model

    def models(self) -> list[model_pb2.Model]:
        """Every stored model, all pages of ListModels read (as `kiln models`)."""
        out: list[model_pb2.Model] = []
        request = model_pb2.ListModelsRequest()
        while True:
            page = self._unary(self._models.ListModels, request)
            out.extend(page.models)
            if not page.next_page_token:
                return out
            request.page_token = page.next_page_token

    def delete(self, model: str) -> None:
        """Deletes a model by id (all its names) or one name (kiln/v1/model.proto DeleteModelRequest)."""
        self._unary(self._models.DeleteModel, model_pb2.DeleteModelRequest(model_id=model))

    # -- compile -------------------------------------------------------------------------------

    def compile_ai8x(self, model: Union[str, "os.PathLike[str]", bytes], device: Union[str, int] = "MAX78000",
                     arch: str = "", dataset: str = "", overrides: Optional[Mapping[str, Any]] = None, *,
                     input_format: Union[str, int] = "auto", use_fifos: bool = False, move_l0: bool = False,
                     verbose: bool = False) -> CompileResult:
        """The izer network YAML for a MAX78000/MAX78002 (kiln/v1/compile.proto). model: a stored
        id or name (str), or the ONNX itself (bytes, or a pathlib.Path sent inline).
        overrides: {"LAYER.KEY": value}, as `kiln compile --set LAYER.KEY=VALUE` (LAYER: a
        YAML layer name, an index or "last"; bool values become true/false)."""
        options = compile_pb2.CompileAi8xOptions(
            device=_enum(compile_pb2.Ai8xDevice.DESCRIPTOR, device, "device", {"ai85": "MAX78000", "ai87": "MAX78002"}),
            input_format=_enum(compile_pb2.InputFormat.DESCRIPTOR, input_format, "input_format"),
            use_fifos=use_fifos, move_l0=move_l0, arch=arch, dataset=dataset, verbose=verbose)
        for spec, value in (overrides or {}).items():
            layer, dot, key = str(spec).rpartition(".")  # LAYER may contain dots, KEY never does
            if not dot or not layer or not key:
                raise KilnError(grpc.StatusCode.INVALID_ARGUMENT, f"override key must be LAYER.KEY, got '{spec}'")
            text = ("true" if value else "false") if isinstance(value, bool) else str(value)
            options.overrides.add(layer=layer, key=key, value=text)
        request = compile_pb2.CompileAi8xRequest(options=options)
        if isinstance(model, str):
            request.model_id = model
        elif isinstance(model, (bytes, bytearray, memoryview)):
            request.model_bytes = bytes(model)
        else:
            try:
                request.model_bytes = Path(model).read_bytes()
            except OSError as e:
                raise KilnError(grpc.StatusCode.NOT_FOUND, f"cannot open '{os.fspath(model)}': {e.strerror}") from e
        r = self._unary(self._compile.CompileAi8x, request)
        return CompileResult(ok=r.ok, yaml=r.yaml, layers=list(r.layers), diagnostics=list(r.diagnostics),
                             izer_command=list(r.izer_command), izer_flags=list(r.izer_flags),
                             resources=r.resources, model_id=r.model_id, response=r)

    # -- runs ----------------------------------------------------------------------------------

    def run(self, model: str, inputs: Optional[Mapping[str, Any]] = None, backend: str = "tt-emu",
            precision: PrecisionLike = None, *, mode: str = "chained", skip_reference: bool = False,
            seed: int = 0, omit_outputs: bool = False,
            layer_precision: Optional[Mapping[str, PrecisionLike]] = None) -> RunResult:
        """Runs a stored model's conv layers (RunConvLayers, kiln/v1/device.proto) and waits.
        inputs: graph input name -> array of any numpy dtype and layout (absent inputs are
        seeded random). backend: "tt-emu" or "reference". precision: {"math_fidelity": "HiFi2",
        "weights_dtype": "bfloat8_b", ...} with the CLI's spellings, or a kiln.v1.Precision.
        mode: "chained" or "per_layer". layer_precision: layer name (LayerReport.name) -> a
        precision as above, merged over `precision` for that layer; each layer's report carries
        the precision it ran with (LayerReport.resolved_precision)."""
        request = self._run_request(model, inputs, backend, precision, mode, skip_reference, seed, omit_outputs,
                                    layer_precision)
        return _run_result(self._unary(self._devices.RunConvLayers, request))

    def _run_request(self, model: str, inputs: Optional[Mapping[str, Any]], backend: str, precision: PrecisionLike,
                     mode: str, skip_reference: bool, seed: int, omit_outputs: bool,
                     layer_precision: Optional[Mapping[str, PrecisionLike]] = None
                     ) -> device_pb2.RunConvLayersRequest:
        request = device_pb2.RunConvLayersRequest(
            model_id=model, backend=backend, precision=_precision(precision),
            mode=_enum(device_pb2.RunMode.DESCRIPTOR, mode, "mode"), skip_reference=skip_reference, seed=seed,
            omit_outputs=omit_outputs)
        for name, value in (inputs or {}).items():
            request.inputs.append(to_tensor(name, value))
        for name, value in (layer_precision or {}).items():
            request.layer_precision[str(name)].CopyFrom(_precision(value))
        return request

    # -- jobs ----------------------------------------------------------------------------------

    def submit(self, model: str, inputs: Optional[Mapping[str, Any]] = None, backend: str = "tt-emu",
               precision: PrecisionLike = None, *, sweep: Optional[Sequence[PrecisionLike]] = None,
               labels: Optional[Mapping[str, str]] = None, idempotency_key: Optional[str] = None,
               mode: str = "chained", skip_reference: bool = False, seed: int = 0,
               omit_outputs: bool = False,
               layer_precision: Optional[Mapping[str, PrecisionLike]] = None) -> job_pb2.Job:
        """Submits the run as a durable job (JobService.SubmitRun, kiln/v1/job.proto); with
        `sweep`, one configuration per precision (layer_precision merged over each). Without an
        idempotency_key a random one is sent, so that a retried SubmitRun never makes a second job."""
        request = job_pb2.SubmitRunRequest(
            run=self._run_request(model, inputs, backend, precision, mode, skip_reference, seed, omit_outputs,
                                  layer_precision),
            idempotency_key=idempotency_key or uuid.uuid4().hex)
        for p in sweep or ():
            request.sweep.append(_precision(p))
        for k, v in (labels or {}).items():
            request.labels[k] = v
        return self._unary(self._jobs.SubmitRun, request)

    def submit_advise(self, model: str, inputs: Union[Mapping[str, Any], Sequence[Mapping[str, Any]], None] = None,
                      *, target_pcc: float = 0.99, space: Sequence[str] = ("fidelity", "weights"),
                      budget_seconds: float = 0, seed: int = 0, tt_emu_level: str = "",
                      per_layer_threshold: bool = False, max_refine_runs: Optional[int] = None,
                      labels: Optional[Mapping[str, str]] = None,
                      idempotency_key: Optional[str] = None) -> job_pb2.Job:
        """Submits a precision-advisor search as a durable job (JobService.SubmitAdvise,
        kiln/v1/job.proto; the search `kiln advise` runs): the cheapest per-layer precision, by an
        estimated relative cost (not a card measurement), whose chained end-to-end PCC meets
        target_pcc. inputs: one input set (graph input name -> array) or a sequence of sets (the
        worst one counts); absent inputs are seeded random. space: the knobs to vary, of
        "fidelity", "weights", "dest", "l1acc", "output_dtype". budget_seconds: 0 = none; when
        spent the answer is the best so far (partial). tt_emu_level: "exact", "fast" or "" (kilnd's).
        Without an idempotency_key a random one is sent, as submit() does."""
        request = job_pb2.SubmitAdviseRequest(idempotency_key=idempotency_key or uuid.uuid4().hex)
        a = request.advise
        a.model_id = model
        sets = [] if inputs is None else [inputs] if isinstance(inputs, Mapping) else list(inputs)
        for one in sets:
            s = a.input_sets.add()
            for name, value in one.items():
                s.inputs.append(to_tensor(name, value))
        a.target_pcc = target_pcc
        a.space.extend(space)
        a.budget_seconds = budget_seconds
        a.seed = seed
        a.tt_emu_level = tt_emu_level
        a.per_layer_threshold = per_layer_threshold
        if max_refine_runs is not None:
            a.max_refine_runs = max_refine_runs
        for k, v in (labels or {}).items():
            request.labels[k] = v
        return self._unary(self._jobs.SubmitAdvise, request)

    def advice(self, job_id: str) -> job_pb2.AdviseResult:
        """A finished advise job's answer (kiln.v1.AdviseResult): per layer its advised config (a
        Precision that run(..., layer_precision={l.name: l.config for l in answer.layers}) takes
        as is), isolated PCC and relative cost; the network's chained PCC and cost against the
        all-HiFi4-bfloat16 baseline (1.0). FAILED_PRECONDITION while the job has not succeeded or
        when it is not an advise job; NOT_FOUND once retention removed the results."""
        for chunk in self._stream(self._jobs.GetJobResult, job_pb2.GetJobResultRequest(job_id=job_id,
                                                                                     omit_outputs=True)):
            if chunk.HasField("result") and chunk.result.HasField("advice"):
                return chunk.result.advice
        raise KilnError(grpc.StatusCode.FAILED_PRECONDITION, f"job {job_id} is not an advise job")

    def advise(self, model: str, inputs: Union[Mapping[str, Any], Sequence[Mapping[str, Any]], None] = None,
               **options: Any) -> job_pb2.AdviseResult:
        """submit_advise(model, inputs, **options), then waits for the job and returns advice().
        A job that did not succeed raises KilnError with its error's code and message."""
        job = self.submit_advise(model, inputs, **options)
        end = self.wait(job.job_id)
        if end.state != job_pb2.SUCCEEDED:
            code = next((c for c in grpc.StatusCode if c.value[0] == end.error.code), grpc.StatusCode.UNKNOWN)
            raise KilnError(code, f"advise job {job.job_id} {job_pb2.JobState.Name(end.state)}: {end.error.message}")
        return self.advice(job.job_id)

    def job(self, job_id: str) -> job_pb2.Job:
        return self._unary(self._jobs.GetJob, job_pb2.GetJobRequest(job_id=job_id))

    def jobs(self, state: Union[str, int] = "JOB_STATE_UNSPECIFIED", model: str = "",
             labels: Optional[Mapping[str, str]] = None) -> Iterator[job_pb2.Job]:
        """Every job (newest first), following pages; state/model/labels filter."""
        request = job_pb2.ListJobsRequest(state=_enum(job_pb2.JobState.DESCRIPTOR, state, "state"), model_id=model,
                                          labels=dict(labels or {}))
        while True:
            page = self._unary(self._jobs.ListJobs, request)
            yield from page.jobs
            if not page.next_page_token:
                return
            request.page_token = page.next_page_token

    def watch(self, job_id: str, watch_again_s: float = 60.0) -> Iterator[job_pb2.JobEvent]:
        """The job's events in order (state changes, finished layers, an advise job's steps as
        advise_step), the past ones first,
        until the job ends. Closing the iterator early ends the stream. A stream that ends
        UNAVAILABLE (kilnd restarting, a replica draining, a farm's database down: the job goes
        on) is opened again for up to `watch_again_s` seconds, as `kiln watch` does, and no event
        is yielded twice (by its sequence); after that the KilnError is raised. The window starts
        again whenever a stream delivers something; a first stream that never opened (a wrong
        address, kilnd not running) raises at once."""
        last = 0
        opened = False
        failing_since: Optional[float] = None
        while True:
            try:
                for event in self._stream(self._jobs.WatchJob, job_pb2.WatchJobRequest(job_id=job_id)):
                    opened = True
                    failing_since = None
                    if 0 < event.sequence <= last:
                        continue  # yielded before the stream was opened again
                    last = event.sequence
                    yield event
                return
            except KilnError as e:
                if e.code != grpc.StatusCode.UNAVAILABLE or not opened:
                    raise
                now = time.monotonic()
                failing_since = now if failing_since is None else failing_since
                if now - failing_since >= watch_again_s:
                    raise
                time.sleep(1.0)
                # grpcio (1.51) can leave a call opened on a channel whose server went away
                # waiting for good; watching the channel's state makes it connect again.
                ready = grpc.channel_ready_future(self._channel)
                try:
                    ready.result(timeout=1.0)
                except grpc.FutureTimeoutError:
                    ready.cancel()

    def wait(self, job_id: str) -> job_pb2.Job:
        """Watches until the job has finished; returns it."""
        for _ in self.watch(job_id):
            pass
        return self.job(job_id)

    def cancel(self, job_id: str) -> job_pb2.Job:
        """Cancels a job: a queued one ends CANCELLED at once, a running one at its next layer;
        a finished one is returned unchanged."""
        return self._unary(self._jobs.CancelJob, job_pb2.CancelJobRequest(job_id=job_id))

    def result(self, job_id: str, omit_outputs: bool = False, partial: bool = False) -> list[RunResult]:
        """A finished job's results, one RunResult per configuration (one for a plain run).
        FAILED_PRECONDITION while the job has not succeeded, also for a FAILED or CANCELLED sweep
        whose first configurations finished (the server streams those: `partial=True` returns
        them); NOT_FOUND once retention removed them."""
        if not partial:
            job = self.job(job_id)
            if job.state in (job_pb2.FAILED, job_pb2.CANCELLED):
                finished = job.progress.configurations_done
                hint = "result(job_id, partial=True) returns the finished ones" if finished else "none finished"
                raise KilnError(grpc.StatusCode.FAILED_PRECONDITION,
                                f"job {job_id} ended {job_pb2.JobState.Name(job.state)} ({job.error.message}) after "
                                f"{finished} of {job.configurations} configuration(s); {hint}")
        results: list[RunResult] = []
        response: Optional[device_pb2.RunConvLayersResponse] = None
        buffers: dict[int, bytearray] = {}
        done: dict[int, bytes] = {}

        def finish() -> None:
            if response is not None:
                raws = [done.get(i, b"") if not omit_outputs else None for i in range(len(response.outputs))]
                results[-1] = _run_result(response, raws, results[-1].configuration, results[-1].requested_precision)

        request = job_pb2.GetJobResultRequest(job_id=job_id, omit_outputs=omit_outputs)
        for chunk in self._stream(self._jobs.GetJobResult, request):
            if chunk.HasField("result"):
                finish()
                response = chunk.result.response
                buffers, done = {}, {}
                placeholder = _run_result(response, [None] * len(response.outputs), chunk.configuration,
                                          chunk.result.precision)
                results.append(placeholder)
            elif chunk.HasField("output"):
                o = chunk.output
                buf = buffers.setdefault(o.output, bytearray())
                if o.offset != len(buf):
                    raise KilnError(grpc.StatusCode.DATA_LOSS,
                                    f"job {job_id}: output {o.output} chunk at offset {o.offset}, expected {len(buf)}")
                buf += o.data
                if o.last:
                    done[o.output] = bytes(buffers.pop(o.output))
        finish()
        return results


def _run_result(r: device_pb2.RunConvLayersResponse, raws: Optional[Sequence[Optional[bytes]]] = None,
                configuration: int = 0, requested: Optional[device_pb2.Precision] = None) -> RunResult:
    """raws: each output's bytes (None: not streamed, no array); default: the tensors' raw_data."""
    outputs: dict[str, np.ndarray] = {}
    for i, t in enumerate(r.outputs):
        raw = t.raw_data if raws is None else raws[i]
        if raw is None:
            continue
        outputs[t.name] = from_tensor(t, raw)
    report = device_pb2.RunConvLayersResponse()
    report.CopyFrom(r)
    for t in report.outputs:
        t.ClearField("raw_data")
    layers = list(report.layers)
    return RunResult(outputs=outputs, layers=layers, passed=report.passed, backend=report.backend,
                     device=report.device, resolved_precision=report.resolved_precision,
                     kiln_version=report.kiln_version, response=report, configuration=configuration,
                     requested_precision=requested)


def _enum(enum: _descriptor.EnumDescriptor, value: Union[str, int], what: str,
          aliases: Optional[Mapping[str, str]] = None) -> int:
    """An enum value from its number, its proto name, or the CLI's spelling: case-insensitive,
    '-' = '_', and a name's distinguishing part ("height" = HEIGHT_SHARDED, "auto" =
    SHARD_LAYOUT_AUTO, "recorded" = DEPTHWISE_RECORDED)."""
    if isinstance(value, int) and not isinstance(value, bool):
        if value in enum.values_by_number:
            return value
        raise KilnError(grpc.StatusCode.INVALID_ARGUMENT, f"{what}: {value} is no {enum.full_name} value")
    s = str(value).strip().lower().replace("-", "_")
    if aliases and s in {k.lower() for k in aliases}:
        s = {k.lower(): v for k, v in aliases.items()}[s].lower()
    names = [v.name for v in enum.values]
    exact = [n for n in names if n.lower() == s]
    partial = [n for n in names if n.lower().endswith("_" + s) or n.lower().startswith(s + "_")]
    found = exact or partial
    if len(found) != 1:
        raise KilnError(grpc.StatusCode.INVALID_ARGUMENT,
                        f"{what}: unknown value '{value}' (expected one of "
                        f"{', '.join(n.lower() for n in names if not n.endswith('_UNSPECIFIED'))})")
    return enum.values_by_name[found[0]].number


_TRUE = {"true", "1", "on", "yes"}
_FALSE = {"false", "0", "off", "no"}


def _precision(value: PrecisionLike) -> device_pb2.Precision:
    """A kiln.v1.Precision from a mapping of its field names (or the CLI's flag names, '-' for
    '_') to values; only the given fields are set, as `kiln run`'s flags."""
    if value is None:
        return device_pb2.Precision()
    if isinstance(value, device_pb2.Precision):
        return value
    p = device_pb2.Precision()
    fields = device_pb2.Precision.DESCRIPTOR.fields_by_name
    for key, v in value.items():
        name = str(key).lstrip("-").replace("-", "_")
        f = fields.get(name)
        if f is None:
            raise KilnError(grpc.StatusCode.INVALID_ARGUMENT,
                            f"precision: unknown field '{key}' (known: {', '.join(sorted(fields))})")
        if f.type == _descriptor.FieldDescriptor.TYPE_ENUM:
            setattr(p, name, _enum(f.enum_type, v, "precision " + name))
        elif f.type == _descriptor.FieldDescriptor.TYPE_BOOL:
            if isinstance(v, str) and v.strip().lower() in _TRUE | _FALSE:
                setattr(p, name, v.strip().lower() in _TRUE)
            elif isinstance(v, (bool, np.bool_)):
                setattr(p, name, bool(v))
            else:
                raise KilnError(grpc.StatusCode.INVALID_ARGUMENT, f"precision {name}: expected true or false, got {v!r}")
        else:
            try:
                setattr(p, name, int(v))
            except (TypeError, ValueError):
                raise KilnError(grpc.StatusCode.INVALID_ARGUMENT,
                                f"precision {name}: expected an integer, got {v!r}") from None
    return p
