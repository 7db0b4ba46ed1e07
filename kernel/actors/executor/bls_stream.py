"""One BLS stream of an instance thread: the responses to a request it sent with
``ModelContext.infer_stream``, handed over by the executor actor as they come, and its
cancellation.

The executor's loop puts each ``(result, final)`` part in the stream's queue
(``on_stream_parts``); the instance thread iterates. ``cancel()`` (Triton's
``cancel()`` on a BLS decoupled response iterator, python_backend#398) asks the scheduler to
cancel the request, once, unless the final part came already; the iteration goes on to the
final part, which the called model sends when it stops. Owns the queue and the cancel flag
only; the actor sends the messages.
"""

from __future__ import annotations

import queue
import threading
from collections.abc import Callable, Iterator

from inferd.protocols.errors import DeadlineExceeded, InferdError
from inferd.protocols.messages import InferResponse

Part = tuple["InferResponse | InferdError | None", bool]


class BlsStream(Iterator["InferResponse | InferdError"]):
    """Iterates the responses (or errors) of one BLS stream; ``timeout`` bounds each wait
    (seconds, ``None``: none). ``send_cancel()`` tells the scheduler; ``close()`` forgets
    the stream in the actor."""

    def __init__(self, timeout: float | None, send_cancel: Callable[[], None],
                 close: Callable[[], object]) -> None:
        self.parts: queue.Queue[Part] = queue.Queue()
        self._timeout = timeout
        self._send_cancel = send_cancel
        self._close = close
        self._lock = threading.Lock()
        self._finished = False
        self._cancelled = False

    def __next__(self) -> InferResponse | InferdError:
        while not self._finished:
            try:
                result, final = self.parts.get(timeout=self._timeout)
            except queue.Empty:
                self._finish()
                raise DeadlineExceeded("no response within the BLS timeout") from None
            if final:
                self._finish()
            if result is not None:
                return result
        raise StopIteration

    def cancel(self) -> None:
        """Cancel the request, as its client going away would: the called model sees
        ``is_cancelled()`` and may stop. Nothing once the stream has ended."""
        with self._lock:
            if self._finished or self._cancelled:
                return
            self._cancelled = True
        self._send_cancel()

    def _finish(self) -> None:
        with self._lock:
            self._finished = True
        self._close()

    def __del__(self) -> None:
        if not self._finished:  # the model dropped it unread: forget its queue
            self._close()
