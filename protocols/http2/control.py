"""The connection-level frames of an HTTP/2 server connection: SETTINGS, PING,
WINDOW_UPDATE and RST_STREAM as they arrive, the rules for a frame on a stream that is not
open (RFC 9113 section 5.1), and the control-frame budget a peer spends on frames that serve
no call (``guard``).

``ControlFrames`` sits between ``streams.ConnectionStreams`` (the streams and what this
side sends) and ``http2.Connection`` (the frame loop, DATA and header blocks), which calls
these handlers as its frames arrive. What they answer (acknowledgements, PING replies,
RST_STREAMs) is queued in ``output``; a breach raises ``ProtocolError``. Compiled with mypyc
as part of the request path.
"""

from __future__ import annotations

from inferd.protocols.http2.frames import (
    ACK,
    DEFAULT_MAX_FRAME,
    ENABLE_PUSH,
    ENHANCE_YOUR_CALM,
    EV_PING_ACK,
    EV_RESET,
    FLOW_CONTROL_ERROR,
    FRAME_SIZE_ERROR,
    INITIAL_WINDOW_SIZE,
    MAX_FRAME_SIZE,
    MAX_WINDOW,
    PING,
    PROTOCOL_ERROR,
    SETTINGS,
    STREAM_CLOSED,
    Event,
    ProtocolError,
    frame,
    rst_stream,
)
from inferd.protocols.http2.streams import (
    CLOSED_BOTH,
    CLOSED_BY_PEER,
    CLOSED_HERE,
    ConnectionStreams,
)


class ControlFrames(ConnectionStreams):
    """The handlers of the frames that concern the connection rather than a request (see the
    module's text); ``http2.Connection`` extends it."""

    def _settings(self, flags: int, stream_id: int, payload: bytes,
                  events: list[Event]) -> None:
        if stream_id:
            raise ProtocolError(PROTOCOL_ERROR, "SETTINGS on a stream")
        if flags & ACK:
            if payload:
                raise ProtocolError(FRAME_SIZE_ERROR, "a SETTINGS acknowledgement with a payload")
            self._spent("SETTINGS")
            return
        if len(payload) % 6:
            raise ProtocolError(FRAME_SIZE_ERROR, "malformed SETTINGS")
        self._spent("SETTINGS")
        for at in range(0, len(payload), 6):
            key = int.from_bytes(payload[at:at + 2], "big")
            value = int.from_bytes(payload[at + 2:at + 6], "big")
            if key == INITIAL_WINDOW_SIZE:
                if value > MAX_WINDOW:
                    raise ProtocolError(FLOW_CONTROL_ERROR, "initial window too large")
                delta = value - self._peer_initial_window
                self._peer_initial_window = value
                for stream in self._streams.values():
                    stream.send_window += delta
                    if stream.send_window > MAX_WINDOW:
                        raise ProtocolError(FLOW_CONTROL_ERROR, "a stream's window overflowed")
            elif key == MAX_FRAME_SIZE:
                if not DEFAULT_MAX_FRAME <= value < 2**24:
                    raise ProtocolError(PROTOCOL_ERROR, f"max frame size {value}")
                self.peer_max_frame = value
            elif key == ENABLE_PUSH and value > 1:
                raise ProtocolError(PROTOCOL_ERROR, "ENABLE_PUSH above 1")
            # HEADER_TABLE_SIZE is moot: this side's encoder uses no dynamic table.
        self.output.append(frame(SETTINGS, ACK, 0))
        self._flush_blocked(events)

    def _ping(self, flags: int, stream_id: int, payload: bytes, events: list[Event]) -> None:
        if stream_id:
            raise ProtocolError(PROTOCOL_ERROR, "PING on a stream")
        if len(payload) != 8:
            raise ProtocolError(FRAME_SIZE_ERROR, "malformed PING")
        if flags & ACK:
            self._spent("PING")
            events.append(Event(EV_PING_ACK, 0, data=payload))
            return
        if not self._pings.received(self._clock(), bool(self._streams)):
            raise ProtocolError(ENHANCE_YOUR_CALM, "too_many_pings")
        self._spent("PING")
        self.output.append(frame(PING, ACK, 0, payload))

    def _window_update(self, stream_id: int, payload: bytes, events: list[Event]) -> None:
        if len(payload) != 4:
            raise ProtocolError(FRAME_SIZE_ERROR, "malformed WINDOW_UPDATE")
        increment = int.from_bytes(payload, "big") & 0x7FFFFFFF
        if not stream_id:
            if not increment:
                raise ProtocolError(PROTOCOL_ERROR, "a WINDOW_UPDATE of 0")
            self.send_window += increment
            if self.send_window > MAX_WINDOW:
                raise ProtocolError(FLOW_CONTROL_ERROR, "the connection's window overflowed")
            sent = self.data_sent
            if self._blocked:
                self._flush_blocked(events)
            if self.data_sent == sent:  # it opened room for nothing waiting
                self._spent("WINDOW_UPDATE")
            return
        stream = self._streams.get(stream_id)
        if stream is None:
            self._not_open(stream_id, "WINDOW_UPDATE")
            self._spent("WINDOW_UPDATE")
            return
        if not increment:
            self._stream_error(stream_id, PROTOCOL_ERROR, events)
            return
        stream.send_window += increment
        if stream.send_window > MAX_WINDOW:
            self._stream_error(stream_id, FLOW_CONTROL_ERROR, events)
            return
        sent = self.data_sent
        if stream.pending or stream.trailers is not None:
            self._flush(stream_id, stream, events)
        if self.data_sent == sent:
            self._spent("WINDOW_UPDATE")

    def _rst_stream(self, stream_id: int, payload: bytes, events: list[Event]) -> None:
        if not stream_id:
            raise ProtocolError(PROTOCOL_ERROR, "RST_STREAM on stream 0")
        if len(payload) != 4:
            raise ProtocolError(FRAME_SIZE_ERROR, "malformed RST_STREAM")
        if stream_id in self._streams:
            # A call cancelled while the server works on it: rapid reset (CVE-2023-44487)
            # costs the server a call's start for two frames.
            if not self._resets.charge(self._clock()):
                raise ProtocolError(ENHANCE_YOUR_CALM, "too many streams reset")
            self._remove(stream_id, CLOSED_BY_PEER)
            events.append(Event(EV_RESET, stream_id, code=int.from_bytes(payload, "big")))
            return
        self._not_open(stream_id, "RST_STREAM")
        self._spent("RST_STREAM")

    def _not_open(self, stream_id: int, kind: str) -> None:
        """A frame other than PRIORITY for a stream that is not open (section 5.1): a
        connection error on an idle stream; on a closed one, what its closing allows."""
        if stream_id > self.last_stream_id:
            raise ProtocolError(PROTOCOL_ERROR, f"{kind} on idle stream {stream_id}")
        how = self._closed.get(stream_id, CLOSED_HERE)
        if how == CLOSED_BY_PEER:
            if kind != "RST_STREAM":
                self.output.append(rst_stream(stream_id, STREAM_CLOSED))
        elif how == CLOSED_BOTH and kind in ("DATA", "HEADERS"):
            raise ProtocolError(STREAM_CLOSED, f"{kind} on closed stream {stream_id}")

    def _spent(self, what: str) -> None:
        """Charge a frame that serves no call to the control-frame budget."""
        if not self._control.charge(self._clock()):
            raise ProtocolError(ENHANCE_YOUR_CALM, f"too many {what}")
