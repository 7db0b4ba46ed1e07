"""The BLS streams the scheduler relays for executors: a model's ``stream_exec`` from inside
another model's ``execute``.

Owns each relayed stream, by the executor that asked and its token: it opens the stream as
any streamed request (the actor's ``open_stream``), sends every response back to the executor
as it comes (``StreamParts``, the last one final; a request refused at the door as one final
failure), and carries out the stream's ``cancel()`` (``CancelRemoteStream``) as a client going
away (the request taken out of its queue, or named to its instance), even while the stream is
still opening. It never resolves or queues a request itself.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable

from inferd.kernel.actors.scheduler.dispatch import Spawn
from inferd.kernel.dataplane.streams import ResponseStream
from inferd.kernel.runtime.router import Router
from inferd.protocols.errors import InferdError, to_failure
from inferd.protocols.messages import (
    CancelRemoteStream,
    InferRequest,
    InferResponse,
    RemoteStreamRequest,
    StreamParts,
)


class RemoteStreams:
    """``open_stream(request)`` opens a stream as the actor does for any streamed request."""

    def __init__(self, router: Router,
                 open_stream: Callable[[InferRequest], Awaitable[ResponseStream]],
                 spawn: Spawn) -> None:
        self._router = router
        self._open = open_stream
        self._spawn = spawn
        # The BLS streams of executors being relayed, by (executor, token), for cancel().
        self._streams: dict[tuple[str, int], ResponseStream | None] = {}
        self._cancelled: set[tuple[str, int]] = set()

    async def relay(self, message: RemoteStreamRequest) -> None:
        """Open ``message``'s stream; its responses go back to ``reply_to`` as they come,
        each as ``StreamParts``."""
        reply_to, token = message.reply_to, message.token

        def send(result: InferResponse | InferdError | None, final: bool) -> None:
            part = to_failure(result) if isinstance(result, InferdError) else result
            self._router.tell(reply_to, StreamParts((token,), (part,), (final,)))

        key = (reply_to, token)
        self._streams[key] = None  # opening: a cancel() now is kept for it
        try:
            stream = await self._open(message.request)
        except InferdError as error:
            self._streams.pop(key, None)
            self._cancelled.discard(key)
            send(error, True)
            return
        self._streams[key] = stream
        if key in self._cancelled:  # cancelled while it was opening
            self._cancelled.discard(key)
            stream.abandon()

        async def forward() -> None:
            try:
                async for result, final in stream:
                    send(result, final)
            finally:
                self._streams.pop(key, None)

        self._spawn(forward)

    def cancel(self, message: CancelRemoteStream) -> None:
        """A BLS stream's ``cancel()``: its request is cancelled as when a client goes away
        (taken out of its queue, or named to its instance, which may stop); the stream still
        relays what comes, up to its final part."""
        key = (message.reply_to, message.token)
        if key not in self._streams:
            return  # it ended already
        stream = self._streams[key]
        if stream is None:
            self._cancelled.add(key)
        else:
            stream.abandon()
