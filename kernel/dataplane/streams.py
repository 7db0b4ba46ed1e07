"""The responses to one inference request as a frontend reads them, in order.

A model that is not decoupled answers a request once; a decoupled one (Triton's
``model_transaction_policy { decoupled: true }``) any number of times, then says it is done,
with its last response or with a final flag alone. ``ResponseStream`` gives a frontend both
the same way: ``async for result, final in stream``, each ``result`` an ``InferResponse``,
an ``InferdError`` (that response failed; a decoupled model may go on), or ``None`` (the
final flag alone), the last with ``final`` true. It lives in the main process only (the
scheduler hands it to a frontend's task); nothing here crosses a process. A reader cancelled
while it waits for the next response (its client went away) abandons the stream: the
scheduler hears it through ``on_abandon`` and stops the request's work.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import TypeAlias

from inferd.protocols.errors import InferdError
from inferd.protocols.messages import InferResponse

StreamResult: TypeAlias = "InferResponse | InferdError | None"


class ResponseStream:
    """Filled by the scheduler with ``put`` (or, for a single answer, from ``single``)."""

    def __init__(self, single: Awaitable[InferResponse] | None = None) -> None:
        self._single = single
        # A single answer is its request's only response: final, with no empty final
        # response after it even when one is asked for (Triton sends those for decoupled
        # models only).
        self.decoupled = single is None
        self._parts: asyncio.Queue[tuple[StreamResult, bool]] = asyncio.Queue()
        self._done = False
        self._map: Callable[[InferResponse], InferResponse] | None = None
        # Called once when the reader gives up before the final response.
        self.on_abandon: Callable[[], None] | None = None

    def map_responses(self, change: Callable[[InferResponse], InferResponse]) -> None:
        """Hand out each response through ``change``; an error it raises becomes that
        response's error."""
        self._map = change

    def put(self, result: StreamResult, final: bool) -> None:
        self._parts.put_nowait((result, final))

    def __aiter__(self) -> ResponseStream:
        return self

    async def __anext__(self) -> tuple[StreamResult, bool]:
        if self._done:
            raise StopAsyncIteration
        if self._single is not None:
            single, self._single = self._single, None
            self._done = True
            try:
                return self._mapped(await single), True
            except InferdError as error:
                return error, True
        try:
            result, final = await self._parts.get()
        except asyncio.CancelledError:
            self.abandon()
            raise
        self._done = final
        if isinstance(result, InferResponse):
            try:
                result = self._mapped(result)
            except InferdError as error:
                result = error
        return result, final

    def abandon(self) -> None:
        """The reader will read no more: the work still owed it may stop."""
        on_abandon, self.on_abandon = self.on_abandon, None
        if on_abandon is not None and not self._done:
            on_abandon()

    def _mapped(self, response: InferResponse) -> InferResponse:
        return response if self._map is None else self._map(response)
