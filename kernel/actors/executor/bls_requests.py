"""An executor's instances' own requests to the server (BLS): ``ModelContext.infer`` and
``ModelContext.infer_stream``, called on instance threads and sent to the scheduler on the
executor's loop.

A plain request is an ask the thread waits on; a stream gets a token, and the scheduler sends
its responses back to the executor as ``StreamParts``, which ``deliver`` hands to the waiting
thread's ``BlsStream`` (``cancel()`` on it tells the scheduler). Owns the tokens and the
streams waiting for responses; it must never block the loop (a request sent from the loop
itself is refused) and knows nothing of instances or batches.
"""

from __future__ import annotations

import asyncio
import itertools
import queue
from collections.abc import Callable, Iterator
from functools import partial

from inferd.kernel.actors.executor.bls_stream import BlsStream
from inferd.kernel.runtime.addresses import SCHEDULER
from inferd.kernel.runtime.router import Router
from inferd.protocols.errors import InferdError, Internal, Unavailable
from inferd.protocols.messages import (
    CancelRemoteStream,
    Failure,
    InferRequest,
    InferResponse,
    RemoteStreamRequest,
    StreamParts,
)


class BlsRequests:
    """The requests the instances of the executor at ``address`` send through ``router``."""

    def __init__(self, router: Router, address: str) -> None:
        self.router = router
        self.address = address
        self._stream_tokens = itertools.count(1)
        # BLS streams waiting for their responses, by token (queues read by instance threads).
        self._streams: dict[
            int, queue.Queue[tuple[InferResponse | InferdError | None, bool]]] = {}

    def infer_function(
        self, loop: asyncio.AbstractEventLoop
    ) -> Callable[[InferRequest, float | None], InferResponse]:
        """``ModelContext.infer``: a request from an instance thread, sent to the scheduler
        (in the main process; from an executor process, through the uplink) on ``loop``."""

        def infer(request: InferRequest, timeout: float | None = None) -> InferResponse:
            try:
                running: asyncio.AbstractEventLoop | None = asyncio.get_running_loop()
            except RuntimeError:
                running = None
            if running is loop:  # it would wait forever on the loop it blocks
                raise Internal("a request to the server cannot be sent from the executor's loop")
            ask = self.router.ask(SCHEDULER, request, timeout=timeout)
            try:
                future = asyncio.run_coroutine_threadsafe(ask, loop)
            except RuntimeError as error:  # the loop is closed: the executor is going
                ask.close()
                raise Unavailable(f"the executor is shutting down: {error}") from None
            reply = future.result()
            if not isinstance(reply, InferResponse):
                raise Internal(f"the scheduler answered {type(reply).__name__} to a request")
            return reply

        return infer

    def infer_stream_function(
        self, loop: asyncio.AbstractEventLoop
    ) -> Callable[[InferRequest, float | None], Iterator[InferResponse | InferdError]]:
        """``ModelContext.infer_stream``: the scheduler streams the responses back to the
        executor as ``StreamParts`` (``deliver``), handed to the waiting thread."""

        def infer_stream(request: InferRequest, timeout: float | None = None) -> BlsStream:
            token = next(self._stream_tokens)
            stream = BlsStream(
                timeout,
                send_cancel=partial(self._tell_from_thread, loop,
                                    CancelRemoteStream(token, self.address)),
                close=partial(self._streams.pop, token, None))
            self._streams[token] = stream.parts
            message = RemoteStreamRequest(request, token, self.address)
            try:
                loop.call_soon_threadsafe(self.router.tell, SCHEDULER, message)
            except RuntimeError as error:  # the loop is closed: the executor is going
                del self._streams[token]
                raise Unavailable(f"the executor is shutting down: {error}") from None
            return stream

        return infer_stream

    def _tell_from_thread(self, loop: asyncio.AbstractEventLoop, message: CancelRemoteStream
                          ) -> None:
        try:
            loop.call_soon_threadsafe(self.router.tell, SCHEDULER, message)
        except RuntimeError:
            pass  # the loop is closed: the executor, and its streams, are going

    def deliver(self, message: StreamParts) -> None:
        """Responses of these streams, each put in its stream's queue (a stream closed
        meanwhile is skipped)."""
        for token, result, final in zip(message.tokens, message.results, message.finals,
                                        strict=True):
            parts = self._streams.get(token)
            if parts is not None:
                answer = (InferdError.from_code(result.code, result.message)
                          if isinstance(result, Failure) else result)
                parts.put((answer, final))
