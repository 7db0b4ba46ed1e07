"""A BLS stream's iterator (``inferd.kernel.actors.executor.bls_stream``): parts until the
final one, ``cancel()`` sent once and never after the end, the timeout per wait."""

from __future__ import annotations

import pytest

from inferd.kernel.actors.executor.bls_stream import BlsStream
from inferd.protocols.errors import DeadlineExceeded
from inferd.protocols.messages import InferResponse


def response(name: str) -> InferResponse:
    return InferResponse(model=name, version="1", outputs=())


def test_the_stream_runs_to_its_final_part_and_is_forgotten() -> None:
    closed: list[bool] = []
    stream = BlsStream(None, send_cancel=lambda: None, close=lambda: closed.append(True))
    stream.parts.put((response("a"), False))
    stream.parts.put((None, False))
    stream.parts.put((response("b"), True))
    assert [r.model for r in stream if isinstance(r, InferResponse)] == ["a", "b"]
    assert closed == [True]


def test_cancel_is_sent_once_and_never_after_the_end() -> None:
    sent: list[bool] = []
    stream = BlsStream(None, send_cancel=lambda: sent.append(True), close=lambda: None)
    stream.parts.put((response("a"), False))
    assert next(stream).model == "a"  # type: ignore[union-attr]
    stream.cancel()
    stream.cancel()
    assert sent == [True]
    stream.parts.put((None, True))  # the called model stopped: the final part alone
    assert list(stream) == []
    ended = BlsStream(None, send_cancel=lambda: sent.append(True), close=lambda: None)
    ended.parts.put((response("z"), True))
    assert len(list(ended)) == 1
    ended.cancel()
    assert sent == [True]


def test_a_wait_past_the_timeout_fails() -> None:
    stream = BlsStream(0.01, send_cancel=lambda: None, close=lambda: None)
    with pytest.raises(DeadlineExceeded):
        next(stream)
