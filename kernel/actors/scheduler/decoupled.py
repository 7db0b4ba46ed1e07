"""The open requests of decoupled models, by token: each response an executor sends under a
request's token (``StreamParts``) goes to that request's stream, in request order under
``preserve_ordering``, and the final one closes it and records the request. Sans-IO: the
scheduler actor hands it messages and replies; it answers streams, it sends nothing."""

from __future__ import annotations

import itertools
import time

from inferd.kernel.actors.scheduler.requests import Queued, Slot, failure_reason
from inferd.kernel.actors.scheduler.version import Version
from inferd.protocols.errors import InferdError, Internal
from inferd.protocols.messages import BatchResult, Failure, InferResponse, Message, StreamParts


class DecoupledRequests:
    def __init__(self) -> None:
        self._open: dict[int, tuple[Version, Queued]] = {}
        self._tokens = itertools.count(1)

    def __contains__(self, token: int) -> bool:
        return token in self._open

    def open(self, version: Version, slot: Slot, batch: list[Queued]) -> tuple[int, ...]:
        """Tokens for a decoupled batch about to go to ``slot``, one per request."""
        tokens = tuple(next(self._tokens) for _ in batch)
        for token, queued in zip(tokens, batch, strict=True):
            self._open[token] = (version, queued)
            queued.executor = slot.executor
        return tokens

    def parts(self, message: StreamParts) -> None:
        """Responses of decoupled requests, from their executor, handed to their streams."""
        for token, result, final in zip(message.tokens, message.results, message.finals,
                                        strict=True):
            entry = self._open.get(token)
            if entry is None:
                continue  # its stream was already failed (unload, executor restart)
            version, queued = entry
            answer: InferResponse | InferdError | None = (
                InferdError.from_code(result.code, result.message)
                if isinstance(result, Failure) else result)
            queued.failed = queued.failed or isinstance(answer, InferdError)
            version.deliver(queued, answer, final)
            if final:
                self._end(token, version, queued)

    def finish_batch(self, version: Version, slot: Slot, batch: list[Queued],
                     tokens: tuple[int, ...], reply: Message | InferdError) -> None:
        """A decoupled batch's instance is free; its requests' responses come on their own
        (those of a batch that failed outright end with its error)."""
        version.batch_finished(slot, len(batch))
        if isinstance(reply, BatchResult):
            version.statistics.record_batch(
                sum(q.batch_size for q in batch), len(batch), reply.compute_ns)
            return
        error = reply if isinstance(reply, InferdError) else Internal(
            f"executor '{slot.executor}' answered a decoupled batch with "
            f"{type(reply).__name__}")
        for token, queued in zip(tokens, batch, strict=True):
            if token in self._open:
                queued.failed = True
                version.deliver(queued, error, True)
                self._end(token, version, queued)

    def fail(self, version: Version, error: InferdError,
             executors: set[str] | None = None) -> None:
        """End the open streams of ``version`` (of ``executors`` only, when given) with
        ``error``."""
        for token, (owner, queued) in list(self._open.items()):
            if owner is version and (executors is None or queued.executor in executors):
                queued.failed = True
                queued.reason = queued.reason or ("BACKEND" if executors else "OTHER")
                version.deliver(queued, error, True)
                self._end(token, version, queued)

    def _end(self, token: int, version: Version, queued: Queued) -> None:
        del self._open[token]
        if queued.trace is not None:
            queued.trace.stamp("REQUEST_END")
        version.statistics.record_request(
            not queued.failed, time.perf_counter_ns() - queued.enqueued_ns,
            queued.started_ns - queued.enqueued_ns, failure_reason(queued))
