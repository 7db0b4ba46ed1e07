"""The streams of one HTTP/2 server connection and what this side sends on them: each open
stream's windows and queued output, the streams remembered once closed and how they closed,
the connection's windows in both directions, and the budgets a peer spends
(``guard``).

``ConnectionStreams`` is ``http2.Connection``'s sending half: ``send_headers``, ``send_data``,
``send_trailers``, ``respond``, ``refuse``, ``reset``, ``ping`` and ``goaway`` queue frames in
``output`` as far as the peer's windows and largest frame allow, the rest waiting in its stream
in order until a WINDOW_UPDATE or SETTINGS frame opens room; ``release`` credits back what the
reader took. It never parses a frame: what the peer sent is ``http2.Connection``'s. Compiled
with mypyc as part of the request path.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Final

from inferd.protocols.http2.frames import (
    CONTINUATION,
    DATA,
    DEFAULT_MAX_FRAME,
    DEFAULT_WINDOW,
    END_HEADERS,
    END_STREAM,
    ENHANCE_YOUR_CALM,
    EV_DRAINED,
    EV_RESET,
    GOAWAY,
    HEADERS,
    NO_ERROR,
    PING,
    REFUSED_STREAM,
    Chunk,
    Event,
    ProtocolError,
    frame,
    frame_header,
    rst_stream,
    window_update,
)
from inferd.protocols.http2.guard import Budget, PingPolicy

# Streams remembered once closed, to tell a late frame (tolerated) from a frame on a stream
# the peer itself closed (STREAM_CLOSED), and how each closed (section 5.1): this side reset
# or ended it first, so the peer's frames in flight are ignored; both sides sent END_STREAM,
# so only WINDOW_UPDATE, RST_STREAM and PRIORITY may still come; the peer reset it, so
# anything but RST_STREAM and PRIORITY is a stream error.
CLOSED_REMEMBERED: Final = 1024
CLOSED_HERE: Final = 0
CLOSED_BOTH: Final = 1
CLOSED_BY_PEER: Final = 2


class Stream:
    """One open stream: its send window and the data and trailers waiting for it, what the
    peer sent and the reader has not released, and the content-length the peer announced."""

    def __init__(self, send_window: int, expected_length: int) -> None:
        self.send_window = send_window
        self.in_window = 0  # received and not yet given back with a WINDOW_UPDATE
        self.held = 0  # received and not yet released by the reader
        self.freed = 0  # released and not yet given back
        self.pending: list[Chunk] = []  # DATA payloads waiting for window, in order
        self.pending_bytes = 0
        self.trailers: bytes | None = None  # sent once ``pending`` is
        self.remote_closed = False
        self.expected_length = expected_length  # content-length, -1 without one
        self.received_length = 0



class ConnectionStreams:
    """The sending half of one HTTP/2 server connection (see the module's text); the
    receiving half, ``http2.Connection``, extends it."""

    def __init__(self, *, reset_budget: int, control_budget: int,
                 ping_policy: PingPolicy | None, stream_window: int,
                 connection_window: int, clock: Callable[[], float]) -> None:
        self.output: list[Chunk] = []
        self.last_stream_id = 0  # the highest stream the peer opened
        self.peer_max_frame = DEFAULT_MAX_FRAME
        self.send_window = DEFAULT_WINDOW
        self.blocked_bytes = 0  # DATA waiting for the peer's windows, all streams
        self.data_sent = 0  # DATA octets sent, all streams: how a caller sees output move
        self._peer_initial_window = DEFAULT_WINDOW
        self._stream_window = stream_window
        self._connection_window = connection_window
        self._in_window = 0  # received on the connection, not yet given back
        self._freed = 0  # released on the connection, not yet given back
        self._streams: dict[int, Stream] = {}
        self._blocked: dict[int, Stream] = {}  # streams with data or trailers waiting
        # Closed streams, newest last, and how they closed (``CLOSED_*``).
        self._closed: dict[int, int] = {}
        self._clock = clock
        self._resets = Budget(reset_budget)
        self._control = Budget(control_budget)
        self._pings = ping_policy if ping_policy is not None else PingPolicy()

    def take_output(self) -> list[Chunk]:
        output = self.output
        self.output = []
        return output

    @property
    def open_streams(self) -> int:
        return len(self._streams)
    def _refusal(self) -> None:
        """Charge a stream this side will not serve to the reset budget."""
        if not self._resets.charge(self._clock()):
            raise ProtocolError(ENHANCE_YOUR_CALM, "too many streams refused")

    def _refused(self, stream_id: int, code: int) -> None:
        """A stream the peer opened and this side will not serve: reset at once."""
        self._refusal()
        self.output.append(rst_stream(stream_id, code))
        self._remember_closed(stream_id, CLOSED_HERE)

    def _stream_error(self, stream_id: int, code: int, events: list[Event]) -> None:
        """Reset ``stream_id`` with ``code``; an open stream's reader hears of it."""
        if stream_id in self._streams:
            self.reset(stream_id, code)
            events.append(Event(EV_RESET, stream_id, code=code))
        else:
            self.output.append(rst_stream(stream_id, code))
    # -------------------------------------------------------------- what this side sends

    def is_open(self, stream_id: int) -> bool:
        return stream_id in self._streams

    def release(self, stream_id: int, size: int) -> None:
        """The reader took ``size`` bytes of ``stream_id``'s DATA: the peer may send as much
        again, on the stream and on the connection."""
        stream = self._streams.get(stream_id)
        if stream is None:
            return  # what it held went back to the connection as it closed
        self._free_connection(size)
        stream.held -= size
        if stream.remote_closed:
            return
        stream.freed += size
        if stream.freed >= self._stream_window // 2:
            self.output.append(window_update(stream_id, stream.freed))
            stream.in_window -= stream.freed
            stream.freed = 0

    def pending(self, stream_id: int) -> int:
        """Bytes of ``stream_id``'s DATA still waiting for the peer's window."""
        stream = self._streams.get(stream_id)
        return stream.pending_bytes if stream is not None else 0

    def send_headers(self, stream_id: int, block: bytes, end_stream: bool = False) -> None:
        if stream_id not in self._streams:
            return
        self._header_frames(stream_id, block, end_stream)
        if end_stream:
            self._close(stream_id)

    def send_data(self, stream_id: int, data: Chunk) -> None:
        """Queue ``data`` on the stream; it leaves as far as the windows allow now."""
        stream = self._streams.get(stream_id)
        if stream is None or not len(data):
            return
        stream.pending.append(data)
        stream.pending_bytes += len(data)
        self.blocked_bytes += len(data)
        self._flush(stream_id, stream, None)

    def send_trailers(self, stream_id: int, block: bytes) -> None:
        """End the stream with ``block`` once its queued data has been sent."""
        stream = self._streams.get(stream_id)
        if stream is None:
            return
        stream.trailers = block
        self._flush(stream_id, stream, None)

    def respond(self, stream_id: int, headers: bytes, data: Chunk, trailers: bytes) -> None:
        """A whole reply: ``headers``, one DATA of ``data``, then ``trailers`` ending it."""
        stream = self._streams.get(stream_id)
        if stream is None:
            return
        size = len(data)
        if (size <= self.peer_max_frame and size <= self.send_window
                and size <= stream.send_window and len(headers) <= self.peer_max_frame
                and len(trailers) <= self.peer_max_frame):
            self.send_window -= size
            self.data_sent += size
            self._pings.forgive()
            self._control.credit(1.0)
            self.output.append(frame_header(len(headers), HEADERS, END_HEADERS, stream_id)
                               + headers + frame_header(size, DATA, 0, stream_id))
            self.output.append(data)
            self.output.append(frame_header(len(trailers), HEADERS, END_HEADERS | END_STREAM,
                                            stream_id) + trailers)
            self._close(stream_id)
            return
        self._header_frames(stream_id, headers, False)
        self.send_data(stream_id, data)
        self.send_trailers(stream_id, trailers)

    def refuse(self, stream_id: int) -> None:
        """Refuse an open stream the server will not serve now (REFUSED_STREAM: the client
        may retry it), charged to the connection's reset budget."""
        if stream_id in self._streams:
            self._refusal()
            self.reset(stream_id, REFUSED_STREAM)

    def reset(self, stream_id: int, code: int) -> None:
        if stream_id in self._streams:
            self._remove(stream_id, CLOSED_HERE)
            self.output.append(rst_stream(stream_id, code))

    def ping(self, payload: bytes) -> None:
        self.output.append(frame(PING, 0, 0, payload))

    def goaway(self, code: int = NO_ERROR, message: str = "") -> None:
        payload = (self.last_stream_id.to_bytes(4, "big") + code.to_bytes(4, "big")
                   + message.encode("utf-8", "replace"))
        self.output.append(frame(GOAWAY, 0, 0, payload))

    def _header_frames(self, stream_id: int, block: bytes, end_stream: bool) -> None:
        self._pings.forgive()
        limit = self.peer_max_frame
        flags = END_STREAM if end_stream else 0
        if len(block) <= limit:
            self.output.append(frame(HEADERS, flags | END_HEADERS, stream_id, block))
            return
        self.output.append(frame(HEADERS, flags, stream_id, block[:limit]))
        for at in range(limit, len(block), limit):
            last = at + limit >= len(block)
            self.output.append(frame(CONTINUATION, END_HEADERS if last else 0, stream_id,
                                     block[at:at + limit]))

    def _flush_blocked(self, events: list[Event] | None) -> None:
        """Send what the streams waiting for window can send now: only those are visited."""
        for stream_id, stream in list(self._blocked.items()):
            if self.send_window <= 0:
                return
            self._flush(stream_id, stream, events)

    def _flush(self, stream_id: int, stream: Stream, events: list[Event] | None) -> None:
        had = stream.pending_bytes
        limit = self.peer_max_frame
        while stream.pending:
            room = min(self.send_window, stream.send_window, limit)
            if room <= 0:
                break
            chunk = stream.pending[0]
            if len(chunk) <= room:
                stream.pending.pop(0)
                piece = chunk
            else:
                view = chunk if isinstance(chunk, memoryview) else memoryview(chunk)
                piece = view[:room]
                stream.pending[0] = view[room:]
            size = len(piece)
            self.send_window -= size
            stream.send_window -= size
            stream.pending_bytes -= size
            self.blocked_bytes -= size
            self.data_sent += size
            self._control.credit(1.0)
            self.output.append(frame_header(size, DATA, 0, stream_id))
            self.output.append(piece)
        if stream.pending:
            self._blocked[stream_id] = stream
            return
        self._blocked.pop(stream_id, None)
        if had:
            self._pings.forgive()
        if stream.trailers is not None:
            self._header_frames(stream_id, stream.trailers, True)
            self._close(stream_id)
        elif had and events is not None:
            events.append(Event(EV_DRAINED, stream_id))

    def _close(self, stream_id: int) -> None:
        """This side sent the stream's last frame: a peer still sending is told to stop."""
        stream = self._streams.get(stream_id)
        if stream is None:
            return
        open_remotely = not stream.remote_closed
        self._remove(stream_id, CLOSED_HERE if open_remotely else CLOSED_BOTH)
        if open_remotely:
            self.output.append(rst_stream(stream_id, NO_ERROR))

    def _remove(self, stream_id: int, how: int) -> None:
        """Forget a closed stream: what it held of the connection's window is given back,
        and what it had waiting to be sent is dropped."""
        stream = self._streams.pop(stream_id)
        if stream.held:
            self._free_connection(stream.held)
        if stream.pending_bytes:
            self.blocked_bytes -= stream.pending_bytes
        self._blocked.pop(stream_id, None)
        self._remember_closed(stream_id, how)

    def _remember_closed(self, stream_id: int, how: int) -> None:
        closed = self._closed
        closed[stream_id] = how
        if len(closed) > CLOSED_REMEMBERED:
            del closed[next(iter(closed))]

    def _free_connection(self, size: int) -> None:
        self._freed += size
        if self._freed >= self._connection_window // 2:
            self.output.append(window_update(0, self._freed))
            self._in_window -= self._freed
            self._freed = 0

