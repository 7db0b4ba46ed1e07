"""HTTP/2's vocabulary as the server half of ``inferd.protocols.http2.connection`` uses it: RFC
9113's frame types, flags, error codes and SETTINGS parameters, the frames this side builds, the
events a ``Connection`` reports and the ``ProtocolError`` that ends one.

Owns the bytes of a frame and the names of its fields; holds no state, reads no socket, and
makes no decision about what a frame means for a stream (``http2`` and ``streams`` do).
Compiled with mypyc as part of the request path.
"""

from __future__ import annotations

from typing import Final

from inferd.protocols.http2.hpack import Headers

PREFACE: Final = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"

# Frame types (RFC 9113 section 6).
DATA: Final = 0
HEADERS: Final = 1
PRIORITY: Final = 2
RST_STREAM: Final = 3
SETTINGS: Final = 4
PUSH_PROMISE: Final = 5
PING: Final = 6
GOAWAY: Final = 7
WINDOW_UPDATE: Final = 8
CONTINUATION: Final = 9

# Flags.
END_STREAM: Final = 0x1
ACK: Final = 0x1
END_HEADERS: Final = 0x4
PADDED: Final = 0x8
PRIORITY_FLAG: Final = 0x20

# Error codes (section 7).
NO_ERROR: Final = 0x0
PROTOCOL_ERROR: Final = 0x1
INTERNAL_ERROR: Final = 0x2
FLOW_CONTROL_ERROR: Final = 0x3
STREAM_CLOSED: Final = 0x5
FRAME_SIZE_ERROR: Final = 0x6
REFUSED_STREAM: Final = 0x7
CANCEL: Final = 0x8
COMPRESSION_ERROR: Final = 0x9
ENHANCE_YOUR_CALM: Final = 0xB

# SETTINGS parameters (section 6.5.2).
HEADER_TABLE_SIZE: Final = 0x1
ENABLE_PUSH: Final = 0x2
MAX_CONCURRENT_STREAMS: Final = 0x3
INITIAL_WINDOW_SIZE: Final = 0x4
MAX_FRAME_SIZE: Final = 0x5
MAX_HEADER_LIST_SIZE: Final = 0x6

DEFAULT_WINDOW: Final = 65_535
DEFAULT_MAX_FRAME: Final = 16_384
MAX_WINDOW: Final = 2**31 - 1

# Event kinds ``Connection.receive`` returns.
EV_HEADERS: Final = 1
EV_DATA: Final = 2
EV_RESET: Final = 3
EV_DRAINED: Final = 4
EV_GOAWAY: Final = 5
EV_PING_ACK: Final = 6
# A stream opened with a header list over the announced limit (``code``: its size): the
# server answers it with an error and nothing else.
EV_HEADERS_TOO_LARGE: Final = 7

Chunk = bytes | memoryview
# No header list is this object: what ``_last_valid`` holds before the first request.


class ProtocolError(Exception):
    """The peer broke HTTP/2: the connection ends with a GOAWAY carrying ``code``."""

    def __init__(self, code: int, message: str) -> None:
        super().__init__(message)
        self.code = code
        self.message = message


class Event:
    """One thing the peer did that the server acts on. ``headers`` for EV_HEADERS, ``data``
    for EV_DATA, ``code`` for EV_RESET, EV_GOAWAY and EV_HEADERS_TOO_LARGE; ``end_stream``
    when the peer has sent the stream's last frame."""

    def __init__(self, kind: int, stream_id: int, end_stream: bool = False,
                 headers: Headers = (), data: bytes = b"", code: int = 0) -> None:
        self.kind = kind
        self.stream_id = stream_id
        self.end_stream = end_stream
        self.headers = headers
        self.data = data
        self.code = code


# ------------------------------------------------------------------------------ frames


def frame_header(length: int, kind: int, flags: int, stream_id: int) -> bytes:
    return (((length << 8 | kind) << 8 | flags) << 32 | stream_id).to_bytes(9, "big")


def frame(kind: int, flags: int, stream_id: int, payload: bytes = b"") -> bytes:
    return frame_header(len(payload), kind, flags, stream_id) + payload


def settings_frame(settings: list[tuple[int, int]]) -> bytes:
    payload = b"".join([key.to_bytes(2, "big") + value.to_bytes(4, "big")
                        for key, value in settings])
    return frame(SETTINGS, 0, 0, payload)


def window_update(stream_id: int, increment: int) -> bytes:
    return frame(WINDOW_UPDATE, 0, stream_id, increment.to_bytes(4, "big"))


def rst_stream(stream_id: int, code: int) -> bytes:
    return frame(RST_STREAM, 0, stream_id, code.to_bytes(4, "big"))



def unpad(payload: bytes) -> bytes:
    if not payload:
        raise ProtocolError(PROTOCOL_ERROR, "padded frame without its pad length")
    pad = payload[0]
    if pad >= len(payload):
        raise ProtocolError(PROTOCOL_ERROR, "padding longer than the frame")
    return payload[1:len(payload) - pad]
