"""Hostile HTTP/2 clients for tests/e2e/test_grpc_hostile.py, and the instruments that judge
what they cost the server: ``Attacker``, a raw socket that sends what no well-behaved client
would and records what the server answers until it ends the connection (its SETTINGS, the
streams it reset, its GOAWAY, the grpc-status of its answers), keeping to the server's
flow-control windows where it sends messages; the header blocks and gRPC messages the
attacks are made of; ``RssSampler``, the server's resident memory (and its children's)
sampled in a thread; and ``GoodClient``, a tritonclient.grpc client calling ``simple`` in a
loop, counting the calls it completes.

It starts no server and asserts nothing: the tests do, from the numbers these return. Frames
are built with inferd.protocols.http2.connection's helpers, header blocks here (literals only, so no
block depends on an earlier one) with the hpack package's Huffman code where one is wanted.
"""

from __future__ import annotations

import contextlib
import socket
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field

import numpy as np
import psutil
import tritonclient.grpc as grpcclient
from hpack import Decoder
from hpack.huffman import HuffmanEncoder
from hpack.huffman_constants import REQUEST_CODES, REQUEST_CODES_LENGTH

from inferd.protocols.http2 import connection as http2
from inferd.protocols.http2.hpack import encode_int

SERVICE = "/inference.GRPCInferenceService/"
# A socket operation waits at most this long, so that sending and reading threads notice a
# deadline or a stop soon after it passes.
IO_SLICE_SECS = 0.1
# A send the server takes nothing of for this long means it has stopped reading.
STALL_SECS = 1.0
# The most of a header block one frame carries: the default SETTINGS_MAX_FRAME_SIZE, which
# every server accepts.
FRAME_PAYLOAD = 16_384

_HUFFMAN = HuffmanEncoder(REQUEST_CODES, REQUEST_CODES_LENGTH)


# ------------------------------------------------------------------------- header blocks


def string(raw: bytes, huffman: bool = False) -> bytes:
    """An HPACK string literal, Huffman-coded if asked."""
    if huffman:
        coded = bytes(_HUFFMAN.encode(raw))
        return encode_int(len(coded), 7, 0x80) + coded
    return encode_int(len(raw), 7, 0x00) + raw


def literal(name: bytes, value: bytes, *, huffman: bool = False) -> bytes:
    """A field the server must not add to its table: a block of these means the same
    whatever came before it."""
    return b"\x00" + string(name) + string(value, huffman)


def indexed_into_table(name: bytes, value: bytes) -> bytes:
    """A literal the server adds to its dynamic table, as entry 62 (RFC 7541 2.3.3)."""
    return b"\x40" + string(name) + string(value)


INDEXED_62 = bytes([0x80 | 62])  # the newest entry of the dynamic table, by reference


def request_block(method: str, extra: Sequence[tuple[bytes, bytes]] = ()) -> bytes:
    """The header block of a gRPC call of ``method``: POST and http from the static table,
    the rest as literals."""
    block = b"\x83\x86"  # :method POST, :scheme http (RFC 7541 appendix A, 3 and 6)
    for name, value in ((b":path", (SERVICE + method).encode()), (b":authority", b"x"),
                        (b"content-type", b"application/grpc"), (b"te", b"trailers"),
                        *extra):
        block += literal(name, value)
    return block


def grpc_message(payload: bytes, compressed: bool = False) -> bytes:
    """A length-prefixed gRPC message."""
    return bytes([int(compressed)]) + len(payload).to_bytes(4, "big") + payload


EMPTY_MESSAGE = grpc_message(b"")


def header_frames(stream_id: int, block: bytes, end_stream: bool = False,
                  frame_payload: int = FRAME_PAYLOAD) -> bytes:
    """HEADERS and, for a block larger than ``frame_payload``, CONTINUATIONs carrying it."""
    pieces = [block[i:i + frame_payload] for i in range(0, len(block), frame_payload)] or [b""]
    flags = http2.END_STREAM if end_stream else 0
    out = []
    for number, piece in enumerate(pieces):
        last = http2.END_HEADERS if number == len(pieces) - 1 else 0
        kind = http2.HEADERS if number == 0 else http2.CONTINUATION
        out.append(http2.frame(kind, (flags if number == 0 else 0) | last, stream_id, piece))
    return b"".join(out)


def call_frames(stream_id: int, block: bytes, message: bytes = EMPTY_MESSAGE) -> bytes:
    """A whole unary call: its headers, then its message ending the stream."""
    return header_frames(stream_id, block) + bytes(
        http2.frame(http2.DATA, http2.END_STREAM, stream_id, message))


def repeated(piece: bytes, count: int, chunk_bytes: int = 1 << 16) -> Iterable[bytes]:
    """``count`` copies of ``piece`` in chunks of about ``chunk_bytes``, so a flood is sent
    in few system calls and costs the sending thread almost nothing."""
    per_chunk = max(1, chunk_bytes // len(piece))
    chunk = piece * per_chunk
    whole, rest = divmod(count, per_chunk)
    for _ in range(whole):
        yield chunk
    if rest:
        yield piece * rest


def odd_streams(first: int = 1) -> Iterable[int]:
    """Client stream ids from ``first`` on."""
    stream_id = first
    while stream_id < 2**31:
        yield stream_id
        stream_id += 2


# ------------------------------------------------------------------------------ the attacker


@dataclass
class Received:
    """What the server sent one connection, frame by frame as it came, payloads dropped."""

    frames: Counter[int] = field(default_factory=Counter)  # frame type -> count
    settings: dict[int, int] = field(default_factory=dict)  # the server's first SETTINGS
    resets: Counter[int] = field(default_factory=Counter)  # RST_STREAM error code -> count
    first_refused: int | None = None  # the lowest stream answered REFUSED_STREAM
    goaway: tuple[int, bytes] | None = None  # (error code, debug data) of the first GOAWAY
    statuses: Counter[str] = field(default_factory=Counter)  # grpc-status -> count, if decoded
    closed_streams: set[int] = field(default_factory=set)  # by END_STREAM or RST_STREAM
    answered: set[int] = field(default_factory=set)  # streams given HEADERS or RST_STREAM
    bytes: int = 0
    ended: str = "open"  # "closed" (FIN), "reset" (RST), or "open" when the wait ran out

    @property
    def goaway_code(self) -> int | None:
        return None if self.goaway is None else self.goaway[0]

    def summary(self) -> str:
        kinds = {http2.DATA: "DATA", http2.HEADERS: "HEADERS", http2.RST_STREAM: "RST_STREAM",
                 http2.SETTINGS: "SETTINGS", http2.PING: "PING", http2.GOAWAY: "GOAWAY",
                 http2.WINDOW_UPDATE: "WINDOW_UPDATE", http2.CONTINUATION: "CONTINUATION"}
        frames = ", ".join(f"{kinds.get(kind, kind)}x{count}"
                           for kind, count in sorted(self.frames.items()))
        goaway = "none" if self.goaway is None else \
            f"0x{self.goaway[0]:x} {self.goaway[1][:60]!r}"
        return (f"connection {self.ended} after {self.bytes} bytes ({frames}); GOAWAY {goaway}; "
                f"resets {dict(self.resets)}; grpc-status {dict(self.statuses)}")


class Attacker:
    """One raw HTTP/2 connection to the server's gRPC port: the preface and the client's
    SETTINGS are sent on connecting, and the server's acknowledged once they come, unless
    ``acknowledge`` is False: a server may apply its limits only once they are (grpc's
    header-list limit, and its stream windows), or hold a connection that never acknowledges
    to fewer streams (grpc, 128 in all). ``send``/``flood`` write frames, ``start_reading``
    reads what comes back in a thread, ``finish`` waits for the server to end the
    connection."""

    def __init__(self, port: int, *, settings: Sequence[tuple[int, int]] = (),
                 acknowledge: bool = True, receive_buffer: int | None = None,
                 decode_headers: bool = False) -> None:
        self.port = port
        self.sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        if receive_buffer is not None:  # before connecting, so the window it offers is small
            self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, receive_buffer)
        self.sock.settimeout(IO_SLICE_SECS)
        self.sock.connect(("127.0.0.1", port))
        self.local_port: int = self.sock.getsockname()[1]
        self.sent = 0
        self.broken = False  # sending failed: the server closed or reset the connection
        self.stalled = False  # the server stopped reading what this side sends
        self.received = Received()
        self._decoder = Decoder() if decode_headers else None
        if self._decoder is not None:
            self._decoder.max_header_list_size = 2**31
        self._block = bytearray()
        self._pending = bytearray()  # the start of a frame not wholly read yet
        # Flow control of what this side sends: the server's initial stream window, and per
        # stream (0: the connection) what it granted by WINDOW_UPDATE and what DATA used.
        self._initial_window = http2.DEFAULT_WINDOW
        self._granted: Counter[int] = Counter()
        self._used: Counter[int] = Counter()
        self._changed = threading.Condition()
        self._reader: threading.Thread | None = None
        self._stop_reading = threading.Event()
        self.send(http2.PREFACE + http2.settings_frame(list(settings)))
        if acknowledge:
            self.read_preface()
            self.send(http2.frame(http2.SETTINGS, http2.ACK, 0))

    def send(self, data: bytes, until: float = float("inf")) -> bool:
        """Writes ``data``; False once the connection is broken, or with part of it still
        unsent once ``until`` (a monotonic time) passes or the server has taken nothing for
        ``STALL_SECS`` (it stopped reading: ``stalled``)."""
        view = memoryview(data)
        progress = time.monotonic()
        while view and not self.broken:
            try:
                sent = self.sock.send(view)
            except TimeoutError:
                now = time.monotonic()
                if now - progress > STALL_SECS:
                    self.stalled = True
                    return False
                if now > until:
                    return False
                continue
            except OSError:
                self.broken = True
                break
            progress = time.monotonic()
            self.sent += sent
            view = view[sent:]
        return not self.broken

    def flood(self, chunks: Iterable[bytes], until: float) -> int:
        """Sends ``chunks`` until they run out, the connection breaks, the server stops
        reading or ``until`` passes; the bytes sent."""
        before = self.sent
        for chunk in chunks:
            if time.monotonic() > until or not self.send(chunk, until):
                break
        return self.sent - before

    def send_message(self, stream_id: int, message: bytes, until: float) -> bool:
        """DATA frames carrying ``message`` and ending the stream, each within the windows
        the server has opened (which needs the reader); False if ``until`` passes first or
        the connection ends."""
        view = memoryview(message)
        while True:
            with self._changed:
                while not (room := min(self._window(0), self._window(stream_id),
                                       FRAME_PAYLOAD, len(view))) and view:
                    if self.broken or self.received.ended != "open" \
                            or time.monotonic() > until:
                        return False
                    self._changed.wait(IO_SLICE_SECS)
                self._used[0] += room
                self._used[stream_id] += room
            piece, view = view[:room], view[room:]
            flags = 0 if view else http2.END_STREAM
            if not self.send(http2.frame(http2.DATA, flags, stream_id, bytes(piece)), until):
                return False
            if not view:
                return True

    def read_preface(self, timeout: float = 10.0) -> None:
        """Reads until the server's SETTINGS and its first connection WINDOW_UPDATE (what it
        sends on accepting) have come, then reads nothing more: for a client that sends
        within the windows granted up front and never reads a reply."""
        self.start_reading()
        deadline = time.monotonic() + timeout
        with self._changed:
            while not (self.received.settings and self._granted[0]):
                if time.monotonic() > deadline or self.received.ended != "open":
                    break
                self._changed.wait(IO_SLICE_SECS)
        self._stop_reading.set()
        assert self._reader is not None
        self._reader.join()
        self._reader = None
        self._stop_reading.clear()

    def _window(self, stream_id: int) -> int:
        initial = http2.DEFAULT_WINDOW if stream_id == 0 else self._initial_window
        return int(initial + self._granted[stream_id] - self._used[stream_id])

    def wait(self, condition: Callable[[Received], bool], until: float) -> bool:
        """Whether ``condition`` holds of what the server has sent by ``until`` (needs the
        reader); False at once if the connection ends first."""
        with self._changed:
            while not condition(self.received):
                if self.received.ended != "open" or self.broken:
                    return False
                left = until - time.monotonic()
                if left <= 0:
                    return False
                self._changed.wait(min(left, IO_SLICE_SECS))
            return True

    def wait_answered(self, stream_id: int, until: float) -> bool:
        """Whether the server has answered ``stream_id`` (headers, or a reset) by ``until``."""
        return self.wait(lambda received: stream_id in received.answered, until)

    def wait_closed(self, stream_id: int, until: float) -> bool:
        """Whether the server has ended ``stream_id`` by ``until``."""
        return self.wait(lambda received: stream_id in received.closed_streams, until)

    def wait_closed_count(self, count: int, until: float) -> bool:
        """Whether the server has ended ``count`` streams by ``until``."""
        return self.wait(lambda received: len(received.closed_streams) >= count, until)

    def start_reading(self) -> None:
        if self._reader is None:
            self._reader = threading.Thread(target=self._read, name="attacker-reader",
                                            daemon=True)
            self._reader.start()

    def finish(self, timeout: float, server_pid: int | None = None) -> Received:
        """What the server sent until it ended the connection, waiting at most ``timeout``
        seconds. With ``server_pid`` and no reader started (a client that never reads), the
        wait is for the server to let go of its socket (reading would drain its output and
        let it go on); only then is what arrived read."""
        deadline = time.monotonic() + timeout
        if self._reader is None and server_pid is not None:
            # psutil's view of the sockets was seen to miss one for a moment: three misses
            # in a row say the server let it go.
            misses = 0
            while misses < 3:
                misses = 0 if server_holds(server_pid, self.local_port) else misses + 1
                if time.monotonic() > deadline:
                    return self.received  # still open, and left unread
                time.sleep(IO_SLICE_SECS / 2)
        self.start_reading()
        assert self._reader is not None
        self._reader.join(max(0.0, deadline - time.monotonic()))
        self._stop_reading.set()
        self._reader.join()
        return self.received

    def close(self) -> None:
        self._stop_reading.set()
        if self._reader is not None:
            self._reader.join()
        self.sock.close()

    def __enter__(self) -> Attacker:
        return self

    def __exit__(self, *_: object) -> None:
        self.close()

    def _read(self) -> None:
        pending = self._pending
        received = self.received
        while not self._stop_reading.is_set():
            try:
                data = self.sock.recv(1 << 20)
            except TimeoutError:
                continue
            except OSError:
                received.ended = "reset"
                break
            if not data:
                received.ended = "closed"
                break
            received.bytes += len(data)
            pending += data
            offset = 0
            while len(pending) - offset >= 9:
                length = int.from_bytes(pending[offset:offset + 3], "big")
                if len(pending) - offset < 9 + length:
                    break
                kind, flags = pending[offset + 3], pending[offset + 4]
                stream_id = int.from_bytes(pending[offset + 5:offset + 9], "big") & 0x7FFFFFFF
                self._frame(kind, flags, stream_id, bytes(pending[offset + 9:offset + 9 + length])
                            if kind != http2.DATA else b"")
                offset += 9 + length
            del pending[:offset]
            with self._changed:
                self._changed.notify_all()
        with self._changed:
            self._changed.notify_all()

    def _frame(self, kind: int, flags: int, stream_id: int, payload: bytes) -> None:
        received = self.received
        received.frames[kind] += 1
        if kind == http2.SETTINGS and not flags & http2.ACK:
            settings = {int.from_bytes(payload[i:i + 2], "big"):
                        int.from_bytes(payload[i + 2:i + 6], "big")
                        for i in range(0, len(payload) - 5, 6)}
            received.settings = received.settings or settings
            with self._changed:
                self._initial_window = settings.get(http2.INITIAL_WINDOW_SIZE,
                                                    self._initial_window)
        elif kind == http2.WINDOW_UPDATE:
            with self._changed:
                self._granted[stream_id] += int.from_bytes(payload[:4], "big") & 0x7FFFFFFF
        elif kind == http2.RST_STREAM:
            code = int.from_bytes(payload[:4], "big")
            received.resets[code] += 1
            received.closed_streams.add(stream_id)
            received.answered.add(stream_id)
            if code == http2.REFUSED_STREAM and (received.first_refused is None
                                                 or stream_id < received.first_refused):
                received.first_refused = stream_id
        elif kind == http2.GOAWAY and received.goaway is None:
            received.goaway = (int.from_bytes(payload[4:8], "big"), payload[8:])
        if kind == http2.HEADERS:
            received.answered.add(stream_id)
        if kind in (http2.HEADERS, http2.DATA) and flags & http2.END_STREAM:
            received.closed_streams.add(stream_id)
        if kind in (http2.HEADERS, http2.CONTINUATION) and self._decoder is not None:
            if kind == http2.HEADERS:
                self._block = bytearray(_unpadded_block(flags, payload))
            else:
                self._block += payload
            if flags & http2.END_HEADERS:
                for name, value in self._decoder.decode(bytes(self._block), raw=True):
                    if name == b"grpc-status":
                        received.statuses[value.decode()] += 1


def _unpadded_block(flags: int, payload: bytes) -> bytes:
    if flags & http2.PADDED:
        payload = payload[1:len(payload) - payload[0]]
    if flags & http2.PRIORITY_FLAG:
        payload = payload[5:]
    return payload


def server_holds(pid: int, client_port: int) -> bool:
    """Whether the server process still has its end of the connection from ``client_port``
    open (a descriptor it has not closed)."""
    try:
        connections = psutil.Process(pid).net_connections(kind="tcp")
    except psutil.NoSuchProcess:
        return False
    return any(c.raddr and c.raddr.port == client_port for c in connections)


# ------------------------------------------------------------------------------ instruments


class RssSampler:
    """The resident memory of a process and its children, sampled in a thread from ``start``
    to ``stop``: ``before`` (the first sample), ``peak`` and ``after`` (the last)."""

    PERIOD_SECS = 0.05

    def __init__(self, pid: int) -> None:
        self.process = psutil.Process(pid)
        self.before = self.peak = self.after = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="rss-sampler", daemon=True)

    def sample(self) -> int:
        total = 0
        with contextlib.suppress(psutil.Error):
            total = self.process.memory_info().rss
            for child in self.process.children(recursive=True):
                with contextlib.suppress(psutil.Error):
                    total += child.memory_info().rss
        return total

    def start(self) -> RssSampler:
        self.before = self.peak = self.after = self.sample()
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        self._thread.join()
        self.after = self.sample()
        self.peak = max(self.peak, self.after)

    def _run(self) -> None:
        while not self._stop.wait(self.PERIOD_SECS):
            self.peak = max(self.peak, self.sample())


def simple_inputs() -> list[grpcclient.InferInput]:
    values = np.arange(16, dtype=np.int32).reshape(1, 16)
    inputs = [grpcclient.InferInput(name, [1, 16], "INT32") for name in ("INPUT0", "INPUT1")]
    for tensor in inputs:
        tensor.set_data_from_numpy(values)
    return inputs


class GoodClient:
    """A well-behaved tritonclient.grpc client calling ``simple`` in a loop in a thread,
    from ``start`` to ``stop``: when each call completed, and what the failed ones said."""

    CALL_TIMEOUT_SECS = 10.0

    def __init__(self, url: str) -> None:
        self.client = grpcclient.InferenceServerClient(url)
        self.completed: list[float] = []
        self.errors: list[str] = []
        self._stop = threading.Event()
        self._first = threading.Event()
        self._thread = threading.Thread(target=self._run, name="good-client", daemon=True)

    def start(self, timeout: float = 30.0) -> GoodClient:
        """Starts the loop and returns once its first call has completed."""
        self._thread.start()
        if not self._first.wait(timeout):
            raise TimeoutError(f"the good client's first call took over {timeout} s: "
                               f"{self.errors[:1]}")
        return self

    def calls_between(self, start: float, end: float) -> int:
        return sum(1 for at in list(self.completed) if start <= at < end)

    def stop(self) -> None:
        self._stop.set()
        self._thread.join()
        self.client.close()

    def _run(self) -> None:
        inputs = simple_inputs()
        while not self._stop.is_set():
            try:
                self.client.infer("simple", inputs, client_timeout=self.CALL_TIMEOUT_SECS)
            except Exception as error:  # every failure is a finding; the loop goes on
                self.errors.append(str(error)[:200])
            else:
                self.completed.append(time.monotonic())
                self._first.set()
