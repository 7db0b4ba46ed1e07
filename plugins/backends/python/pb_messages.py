"""``pb_utils.InferenceRequest`` and ``pb_utils.InferenceResponse``, BLS calls included.

A request is either one ``execute`` receives (built from an inferd request, its tensors
wrapped without copying) or one a model builds to call another model (BLS): ``exec()`` sends
it through the server call the backend bound to the thread (``scope``) and returns the
response, a failure included as a response whose ``has_error()`` is True; ``async_exec()`` does
the same in a worker thread of the running event loop. Owns nothing else.
"""

from __future__ import annotations

import asyncio
import json
import threading
from collections.abc import Callable, Iterable, Iterator, Sequence
from typing import Any

from inferd.plugins.backends.python import scope
from inferd.plugins.backends.python.pb_errors import TritonError, TritonModelException
from inferd.plugins.backends.python.pb_tensor import Tensor
from inferd.protocols.errors import InferdError
from inferd.protocols.messages import InferRequest, InferResponse

TRITONSERVER_REQUEST_RELEASE_ALL = 1
TRITONSERVER_REQUEST_FLAG_SEQUENCE_START = 1
TRITONSERVER_REQUEST_FLAG_SEQUENCE_END = 2
TRITONSERVER_RESPONSE_COMPLETE_FINAL = 1


class InferenceResponse:
    """One response: ``InferenceResponse(output_tensors=[...])``, or
    ``InferenceResponse(error=TritonError("why"))``."""

    def __init__(
        self,
        output_tensors: Sequence[Tensor] | None = None,
        error: TritonError | None = None,
        parameters: dict[str, Any] | None = None,
    ) -> None:
        if error is not None and not isinstance(error, TritonError):
            raise TritonModelException(
                f"InferenceResponse error must be a TritonError, not {type(error).__name__}"
            )
        tensors = list(output_tensors or [])
        for tensor in tensors:
            if not isinstance(tensor, Tensor):
                raise TritonModelException(
                    f"InferenceResponse output_tensors must be Tensor objects, found "
                    f"{type(tensor).__name__}"
                )
        self._output_tensors = tensors
        self._error = error
        self._parameters = _checked_parameters(parameters)

    def output_tensors(self) -> list[Tensor]:
        return self._output_tensors

    def has_error(self) -> bool:
        return self._error is not None

    def error(self) -> TritonError | None:
        return self._error

    def parameters(self) -> str:
        """The response parameters as a JSON string."""
        return triton_json(self._parameters)

    def parameters_dict(self) -> dict[str, Any]:
        return dict(self._parameters)

    @classmethod
    def from_inferd(cls, response: InferResponse) -> InferenceResponse:
        received = cls([Tensor.from_inferd(tensor) for tensor in response.outputs])
        received._parameters = dict(response.parameters)
        return received


def _checked_parameters(parameters: Any) -> dict[str, Any]:
    if parameters is None:
        return {}
    if isinstance(parameters, str):
        parameters = json.loads(parameters) if parameters else {}
    if not isinstance(parameters, dict):
        raise TritonModelException("parameters must be a dict of str to bool, int or str")
    for key, value in parameters.items():
        if not isinstance(key, str) or not isinstance(value, (bool, int, float, str)):
            raise TritonModelException(
                f"Expect parameters keys to have type str and values to have type bool, int "
                f"or str, found {key!r}: {type(value).__name__}"
            )
    return dict(parameters)


class _Trace:
    def get_context(self) -> str | None:
        return None


class InferenceResponseSender:
    """What ``request.get_response_sender()`` gives a decoupled model: ``send`` the request's
    responses, any number, from any thread, the last with
    ``flags=TRITONSERVER_RESPONSE_COMPLETE_FINAL`` (with a response, or alone)."""

    def __init__(self, deliver: Callable[[InferenceResponse | None, bool], None],
                 cancelled: Callable[[], bool] = lambda: False) -> None:
        self._deliver = deliver
        self._cancelled = cancelled
        self._lock = threading.Lock()
        self._closed = False

    def send(self, response: InferenceResponse | None = None, flags: int = 0) -> None:
        final = bool(flags & TRITONSERVER_RESPONSE_COMPLETE_FINAL)
        if response is None and not final:
            raise TritonModelException("Inference Response object must be provided when the "
                                       "response flags is set to zero.")
        if response is not None and not isinstance(response, InferenceResponse):
            raise TritonModelException(f"send expects an InferenceResponse, not "
                                       f"{type(response).__name__}")
        with self._lock:  # responses keep the order of the sends
            if self._closed:
                raise TritonModelException("Unable to send response. Response sender has "
                                           "been closed.")
            self._closed = final
            self._deliver(response, final)

    def is_cancelled(self) -> bool:
        """Whether the request's client went away: the model may stop and send the final
        flag."""
        return self._cancelled()

    def close(self) -> bool:
        """Close the sender if it is open (the backend ends the request); whether it was."""
        with self._lock:
            was_open, self._closed = not self._closed, True
        return was_open


class InferenceRequest:
    """A request: the ones ``execute`` receives, or a BLS request a model builds with
    ``InferenceRequest(model_name=..., inputs=[...], requested_output_names=[...])`` and
    sends with ``exec()`` or ``await async_exec()``. ``timeout`` is in microseconds (0: none);
    ``model_version`` -1 is the highest ready version."""

    def __init__(
        self,
        request_id: str = "",
        correlation_id: int | str = 0,
        inputs: Sequence[Tensor] | None = None,
        requested_output_names: Iterable[str] | None = None,
        model_name: str | None = None,
        model_version: int = -1,
        flags: int = 0,
        timeout: int = 0,
        preferred_memory: Any = None,
        trace: Any = None,
        parameters: dict[str, Any] | str | None = None,
    ) -> None:
        if inputs is None or requested_output_names is None or model_name is None:
            raise TypeError(
                "InferenceRequest needs inputs, requested_output_names and model_name"
            )
        if not isinstance(correlation_id, (int, str)):
            raise TritonModelException("Correlation ID must be integer or string")
        self._request_id = str(request_id)
        self._correlation_id = correlation_id
        self._inputs = list(inputs)
        self._requested_output_names = list(requested_output_names)
        self._model_name = str(model_name)
        self._model_version = int(model_version)
        self._flags = int(flags)
        self._timeout = int(timeout)
        self._parameters = _checked_parameters(parameters)
        self._response_sender: InferenceResponseSender | None = None
        self._cancelled: Callable[[], bool] | None = None

    @classmethod
    def from_inferd(cls, request: InferRequest, output_names: Sequence[str]) -> InferenceRequest:
        """The request ``execute`` sees; ``output_names`` are the outputs to produce (Triton
        lists every output when the client names none)."""
        version = int(request.version) if request.version.isdigit() else -1
        parameters = request.parameters
        sequence_id = parameters.get("sequence_id", 0)
        # Triton's request flags: what the client said of its sequence (a null request of
        # the sequence batcher has no parameters, so no flags, as in Triton).
        flags = ((TRITONSERVER_REQUEST_FLAG_SEQUENCE_START if parameters.get("sequence_start")
                  else 0)
                 | (TRITONSERVER_REQUEST_FLAG_SEQUENCE_END if parameters.get("sequence_end")
                    else 0))
        received = cls(
            request_id=request.id,
            correlation_id=sequence_id if isinstance(sequence_id, (int, str)) else 0,
            inputs=[Tensor.from_inferd(tensor) for tensor in request.inputs],
            requested_output_names=request.outputs or output_names,
            model_name=request.model,
            model_version=version,
            flags=flags,
            timeout=request.timeout_us,
        )
        received._parameters = dict(request.parameters)  # what the client sent, unchecked
        return received

    def to_inferd(self) -> InferRequest:
        """This request as inferd sends it to the scheduler (a BLS call)."""
        return InferRequest(
            model=self._model_name,
            inputs=tuple(tensor.to_inferd() for tensor in self._inputs),
            version="" if self._model_version < 0 else str(self._model_version),
            id=self._request_id,
            outputs=tuple(self._requested_output_names),
            parameters=dict(self._parameters),
            timeout_us=max(0, self._timeout),
        )

    def inputs(self) -> list[Tensor]:
        return self._inputs

    def request_id(self) -> str:
        return self._request_id

    def correlation_id(self) -> int | str:
        return self._correlation_id

    def requested_output_names(self) -> list[str]:
        return self._requested_output_names

    def parameters(self) -> str:
        """The request parameters as a JSON string."""
        return triton_json(self._parameters)

    def flags(self) -> int:
        return self._flags

    def set_flags(self, flags: int) -> None:
        self._flags = int(flags)

    def timeout(self) -> int:
        return self._timeout

    def trace(self) -> _Trace:
        return _Trace()

    def is_cancelled(self) -> bool:
        """Whether the client of a request ``execute`` received went away (disconnected,
        cancelled, or past its deadline) while it runs: the model may stop early."""
        return self._cancelled is not None and self._cancelled()

    def watch_cancellation(self, cancelled: Callable[[], bool]) -> None:
        """Where ``is_cancelled`` looks; the backend sets it."""
        self._cancelled = cancelled

    def get_response_sender(self) -> InferenceResponseSender:
        if self._response_sender is None:
            raise TritonModelException(
                "a response sender is given to the requests of decoupled models only "
                "(model_transaction_policy { decoupled: true })")
        return self._response_sender

    def attach_response_sender(self, sender: InferenceResponseSender) -> None:
        """Give this request (of a decoupled model) its sender; the backend does."""
        self._response_sender = sender

    def set_release_flags(self, flags: int) -> None:
        if flags != TRITONSERVER_REQUEST_RELEASE_ALL:
            raise TritonModelException(
                "inferd's python backend does not support rescheduling requests"
            )

    def exec(self, decoupled: bool = False) -> Any:
        """Run this request on its model through the server's scheduler and return its
        ``InferenceResponse``; a failure comes back as a response whose ``has_error()`` is
        True. With ``decoupled`` an iterator over the model's responses, as they come (any
        number for a decoupled model)."""
        if decoupled:
            return ResponseIterator(_server_infer_stream(), self)
        return _execute(_server_infer(), self)

    def async_exec(self, decoupled: bool = False) -> Any:
        """``exec`` as an awaitable, for ``async def execute``: several can run at once. With
        ``decoupled`` it gives the response iterator once the request is sent; iterating it
        waits for each response, as in Triton."""
        if not decoupled:
            infer = _server_infer()
            return asyncio.get_running_loop().run_in_executor(None, _execute, infer, self)
        infer_stream = _server_infer_stream()

        async def iterate() -> ResponseIterator:
            return ResponseIterator(infer_stream, self)

        return iterate()


def _server_call(name: str) -> Any:
    """The scope's ``infer`` or ``infer_stream``: how this instance reaches the server."""
    current = scope.current()
    call = getattr(current, name, None) if current is not None else None
    if call is None:
        raise TritonModelException(
            "BLS requests need a running inferd server; this model instance has none"
        )
    return call


def _server_infer() -> scope.ServerInfer:
    infer: scope.ServerInfer = _server_call("infer")
    return infer


def _server_infer_stream() -> scope.ServerInferStream:
    infer_stream: scope.ServerInferStream = _server_call("infer_stream")
    return infer_stream


class ResponseIterator(Iterator[InferenceResponse]):
    """What ``exec(decoupled=True)`` returns: the responses to a BLS request as they come, a
    failure as a response with an error. ``cancel()`` cancels the request (Triton's, from
    python_backend#398): the called model sees ``is_cancelled()`` and may stop; the iteration
    still runs to its final response. A cancel after the last response does nothing."""

    def __init__(self, infer_stream: scope.ServerInferStream, request: InferenceRequest) -> None:
        timeout = request.timeout() / 1e6 if request.timeout() > 0 else None
        self._results: Iterator[InferResponse | InferdError] | None = None
        self._error: InferdError | None = None
        try:
            self._results = infer_stream(request.to_inferd(), timeout)  # sent now
        except InferdError as error:
            self._error = error

    def __iter__(self) -> ResponseIterator:
        return self

    def __next__(self) -> InferenceResponse:
        if self._error is not None:
            error, self._error = self._error, None
            return InferenceResponse(error=TritonError.from_inferd(error))
        if self._results is None:
            raise StopIteration
        try:
            result = next(self._results)
        except StopIteration:
            self._results = None
            raise
        except InferdError as error:
            self._results = None
            return InferenceResponse(error=TritonError.from_inferd(error))
        if isinstance(result, InferdError):
            return InferenceResponse(error=TritonError.from_inferd(result))
        return InferenceResponse.from_inferd(result)

    def cancel(self) -> None:
        cancel = getattr(self._results, "cancel", None)
        if cancel is not None:
            cancel()


def _execute(infer: scope.ServerInfer, request: InferenceRequest) -> InferenceResponse:
    try:
        return InferenceResponse.from_inferd(infer(request.to_inferd(), None))
    except InferdError as error:
        return InferenceResponse(error=TritonError.from_inferd(error))
    except Exception as error:  # noqa: BLE001 - Triton reports BLS failures in the response
        return InferenceResponse(error=TritonError(f"{type(error).__name__}: {error}"))


def triton_json(document: dict[str, Any]) -> str:
    """JSON as Triton's own writer gives it to a model: compact, UTF-8 left as it is."""
    return json.dumps(document, separators=(",", ":"), ensure_ascii=False)
