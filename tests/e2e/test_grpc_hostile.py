"""The gRPC frontend against hostile HTTP/2 clients, one test per attack class, each on both
servers (``--grpc-implementation`` loop and grpcio), each on a server of its own.

Every test measures a well-behaved tritonclient.grpc client's rate on a quiet server, then
runs one attacking connection (raw frames from tests/e2e/h2_attacks.py, bounded in bytes and
in time) while the good client goes on, and asserts that the server stays live, answers the
good client throughout at no less than half its quiet rate (both measured once more, the
machine being shared, when the first attack's fell short), keeps its resident memory (its
children's included) within the test's stated growth, and ends the attacking connection with
the GOAWAY the loop server's contract names (docs/security.md). Where grpc.aio cannot be
bounded that way the grpcio case is an xfail(strict=True) whose reason is what it was seen
to do; the loop server is never excused.
"""

from __future__ import annotations

import functools
import time
import zlib
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

import pytest
import tritonclient.grpc as grpcclient
from tritonclient.grpc import service_pb2

from inferd.protocols.http2 import connection as http2
from inferd.protocols.http2.hpack import encode_int
from tests.e2e import h2_attacks as h2a
from tests.e2e.h2_attacks import Attacker, GoodClient, Received, RssSampler
from tests.e2e.inferd_harness import WAIT_SECS, InferdHarness, ServerHandle

MIB = 2**20
# The good client's rate on the quiet server, then during the attack: windows long enough
# that the count is steady on two busy cores (over half-second spans it varied by 40%).
QUIET_SECS = 1.25
ATTACK_SECS = 2.5
MIN_RATE_SHARE = 0.5
# After the attack window, how long the server may take to end the attacking connection.
END_SECS = 1.0
# A client that never reads is cut off once the server's output for it passes the
# connection buffer and stays there; how fast it gets there depends on how fast the
# (shared) machine lets the server answer, so the attack may go on past the window and
# the wait for the close is longer (events both: the server stops reading, lets go).
UNREAD_SEND_SECS = 8.0
UNREAD_END_SECS = 5.0
# A connection whose output does not move is closed after this (the loop server's
# --grpc-write-timeout-secs, 30 s by default): short, so that such a close falls within
# the attack window.
WRITE_TIMEOUT_SECS = 1
# The resident growth (server and children) an attack may cost unless its test states its
# own: the most one connection may hold (4 MiB of output waiting, 16 MiB of input window,
# a 64 KiB header block) several times over, and far below what an unbounded server took
# (grpc.aio: 100 MiB and more from an HPACK bomb, 200 MiB from 258k header fields).
RSS_GROWTH = 64 * MIB

CALM = http2.ENHANCE_YOUR_CALM


def implementations(grpcio_gap: str | None = None, *, strict: bool = True) -> list[object]:
    """Both servers; grpcio as an xfail where ``grpcio_gap`` says what it fails, strict
    unless its outcome depends on the machine's load (``strict=False``, saying so)."""
    if grpcio_gap is None:
        return ["loop", "grpcio"]
    return ["loop", pytest.param("grpcio", marks=pytest.mark.xfail(strict=strict,
                                                                    reason=grpcio_gap))]


# ------------------------------------------------------------------------- the measurement


@dataclass
class Outcome:
    """What one attack cost the server, and how it ended the attacking connection."""

    implementation: str
    rounds: int  # 2 when the first attack's rate fell short and it was run again
    quiet_rate: float
    attack_rate: float
    good_errors: list[str]
    rss_before: int
    rss_peak: int
    rss_after: int
    sent: int
    stalled: bool  # the server stopped reading the attacker
    received: Received
    alive: bool

    def __str__(self) -> str:
        rounds = f" (round {self.rounds})" if self.rounds > 1 else ""
        stalled = " (then the server stopped reading)" if self.stalled else ""
        return (f"[{self.implementation}] alive={self.alive}; good client {self.quiet_rate:.0f}"
                f"/s quiet, {self.attack_rate:.0f}/s attacked{rounds}, "
                f"{len(self.good_errors)} failed {self.good_errors[:2]}; RSS "
                f"{self.rss_before / MIB:.0f} -> peak {self.rss_peak / MIB:.0f} -> "
                f"{self.rss_after / MIB:.0f} MiB; attacker sent {self.sent} bytes{stalled}; "
                f"{self.received.summary()}")


# Connects, sends until the monotonic time it is given, and returns its Attacker. Run once
# more when the first run's rate fell short, so it builds what it sends each time.
Attack = Callable[[ServerHandle, float], Attacker]


def under_attack(server: ServerHandle, attack: Attack, *, reads: bool = True,
                 send_secs: float = ATTACK_SECS, end_secs: float = END_SECS) -> Outcome:
    """Measures the good client's rate on the quiet server, then while ``attack`` runs in a
    thread (sending for ``send_secs`` at most); then waits at most ``end_secs`` for the
    server to end the attacking connection (``reads=False``: the attacker never reads, so
    the wait is on the server letting go of its socket). The machine is shared (two cores,
    other test files beside this one), so a rate that fell short is measured again, quiet
    and attacked, on a new connection: a fall that does not come again was the machine's."""
    pid = server.process.pid
    good = GoodClient(server.grpc_url).start()
    memory = RssSampler(pid).start()
    rounds = 0
    try:
        while True:
            rounds += 1
            quiet_start = time.monotonic()
            time.sleep(QUIET_SECS)  # the measuring window itself
            quiet = good.calls_between(quiet_start, quiet_start + QUIET_SECS) / QUIET_SECS
            attack_start = time.monotonic()
            attack_end = attack_start + ATTACK_SECS
            with ThreadPoolExecutor(1) as pool:
                running = pool.submit(attack, server, attack_start + send_secs)
                time.sleep(max(0.0, attack_end - time.monotonic()))  # the attack's window
                # Bounded by the attack's own deadline; the margin covers its connecting.
                attacker = running.result(timeout=send_secs + WAIT_SECS)
            attacked = good.calls_between(attack_start, attack_end) / ATTACK_SECS
            with attacker:
                received = attacker.finish(end_secs, None if reads else pid)
            if attacked >= MIN_RATE_SHARE * quiet or rounds == 2:
                break
    finally:
        good.stop()
        memory.stop()
    with grpcclient.InferenceServerClient(server.grpc_url) as client:
        alive = server.process.poll() is None and client.is_server_live()
    outcome = Outcome(server.implementation, rounds, quiet,  # type: ignore[attr-defined]
                      attacked, good.errors, memory.before, memory.peak, memory.after,
                      attacker.sent, attacker.stalled, received, alive)
    print(outcome)
    return outcome


def assert_withstood(outcome: Outcome, *, goaway: set[int | None],
                     rss_growth: int = RSS_GROWTH, ends: bool = True) -> None:
    """The checks every attack makes: live, the good client served at half its quiet rate
    or better and never failed, memory within ``rss_growth``, and the connection ended
    (unless ``ends`` is False) with a GOAWAY in ``goaway`` (None: none arrived)."""
    assert outcome.alive, outcome
    assert not outcome.good_errors, outcome
    assert outcome.attack_rate >= MIN_RATE_SHARE * outcome.quiet_rate, outcome
    assert outcome.rss_peak - outcome.rss_before <= rss_growth, outcome
    if ends:
        assert outcome.received.ended != "open", outcome
    else:
        assert outcome.received.ended == "open", outcome
    assert outcome.received.goaway_code in goaway, outcome


def serve(inferd: InferdHarness, implementation: str, *flags: str,
          models: tuple[str, ...] = ("simple",)) -> ServerHandle:
    """A server of the attack's own: a fresh one for each attack class."""
    loads = [f"--load-model={model}" for model in models]
    server = inferd.start(inferd.repository(*models), "--model-control-mode=explicit", *loads,
                          f"--grpc-implementation={implementation}",
                          f"--grpc-write-timeout-secs={WRITE_TIMEOUT_SECS}", *flags)
    server.implementation = implementation  # type: ignore[attr-defined]
    return server


# ---------------------------------------------------------------------------- the attacks

FLOOD_FRAMES = 100_000  # a flood of 9-to-17-byte frames: 0.9 to 1.7 MB


def flood(frame: bytes, count: int = FLOOD_FRAMES, *, reads: bool = True,
          opening: bytes = b"", acknowledge: bool = True) -> Attack:
    """An attack sending ``opening``, then ``count`` copies of ``frame``."""
    def attack(server: ServerHandle, until: float) -> Attacker:
        attacker = Attacker(server.ports["grpc"], acknowledge=acknowledge)
        if reads:
            attacker.start_reading()
        if attacker.send(opening, until):
            attacker.flood(h2a.repeated(frame, count), until)
        return attacker
    return attack


def flood_of(frames: Callable[[], Iterable[bytes]], acknowledge: bool = True) -> Attack:
    """An attack sending what ``frames()`` yields."""
    def attack(server: ServerHandle, until: float) -> Attacker:
        attacker = Attacker(server.ports["grpc"], acknowledge=acknowledge)
        attacker.start_reading()
        attacker.flood(frames(), until)
        return attacker
    return attack


def batched(pieces: Iterable[bytes], size: int = 1 << 16) -> Iterator[bytes]:
    """``pieces`` joined into chunks of about ``size`` bytes, one system call each."""
    chunk: list[bytes] = []
    length = 0
    for piece in pieces:
        chunk.append(piece)
        length += len(piece)
        if length >= size:
            yield b"".join(chunk)
            chunk, length = [], 0
    if chunk:
        yield b"".join(chunk)


HELD_STREAMS = 100  # under the 128 concurrent streams both servers allow


@pytest.mark.parametrize("implementation", implementations(
    "grpc.aio takes any number of WINDOW_UPDATEs (303,000 here) and keeps the connection"))
def test_window_update_flood_over_open_streams(inferd: InferdHarness,
                                               implementation: str) -> None:
    server = serve(inferd, implementation)
    streams = range(1, 2 * HELD_STREAMS, 2)
    block = h2a.request_block("ModelInfer")
    opening = b"".join(h2a.header_frames(stream, block) for stream in streams)
    # Increments of one: 3,000 per stream over the flood, far from any window's maximum.
    updates = b"".join(http2.window_update(stream, 1) for stream in (0, *streams))
    outcome = under_attack(server, flood(updates, 3000, opening=opening))
    assert_withstood(outcome, goaway={CALM})


def simple_request() -> bytes:
    request = service_pb2.ModelInferRequest(model_name="simple")
    for tensor in h2a.simple_inputs():
        request.inputs.append(tensor._get_tensor())
        request.raw_input_contents.append(tensor._get_content())
    return bytes(request.SerializeToString())


UNREAD_CALLS = 20_000  # each answer about 250 bytes: 5 MB the client never takes


@pytest.mark.parametrize("implementation", implementations(
    "grpc.aio has no write timeout: the connection that never reads stays open with its "
    "answers queued"))
def test_client_that_never_reads_its_answers(inferd: InferdHarness,
                                             implementation: str) -> None:
    server = serve(inferd, implementation)
    message = h2a.grpc_message(simple_request())
    block = h2a.request_block("ModelInfer")
    # Within the connection window both servers grant on accepting (grpcio 4 MiB), so the
    # client need read nothing after the server's preface (which it acknowledges).
    assert UNREAD_CALLS * len(message) < 4 * MIB

    def attack(server: ServerHandle, until: float) -> Attacker:
        attacker = Attacker(server.ports["grpc"], receive_buffer=4096)
        calls = (h2a.call_frames(stream, block, message)
                 for stream in range(1, 2 * UNREAD_CALLS, 2))
        attacker.flood(calls, until)
        return attacker

    outcome = under_attack(server, attack, reads=False, send_secs=UNREAD_SEND_SECS,
                           end_secs=UNREAD_END_SECS)
    # Closed by the write timeout; its GOAWAY waits behind the answers the client never read.
    assert_withstood(outcome, goaway={CALM, None})


BLOCKED_CALLS = 8
REPLY_BYTES = MIB
# 8 MiB of requests read, 4 MiB of answers held, and their copies on the way.
ZERO_WINDOW_RSS_GROWTH = 64 * MIB


def identity_request(values: int) -> bytes:
    request = service_pb2.ModelInferRequest(model_name="identity_fp32")
    request.inputs.add(name="INPUT0", datatype="FP32", shape=[values])
    request.raw_input_contents.append(bytes(4 * values))
    return bytes(request.SerializeToString())


@pytest.mark.parametrize("implementation", implementations(
    "grpc.aio holds every answer the zero window blocks, refuses no stream, and keeps the "
    "connection: nothing times it out"))
def test_zero_receive_window_with_large_answers(inferd: InferdHarness,
                                                implementation: str) -> None:
    server = serve(inferd, implementation, models=("simple", "identity_fp32"))
    message = h2a.grpc_message(identity_request(REPLY_BYTES // 4))
    block = h2a.request_block("ModelInfer")

    def attack(server: ServerHandle, until: float) -> Attacker:
        attacker = Attacker(server.ports["grpc"], settings=[(http2.INITIAL_WINDOW_SIZE, 0)])
        attacker.start_reading()
        for stream in range(1, 2 * BLOCKED_CALLS, 2):
            # One call at a time, each answered (its headers, or refused) before the next,
            # so that the answers held are there when the next stream opens.
            if not (attacker.send(h2a.header_frames(stream, block), until)
                    and attacker.send_message(stream, message, until)
                    and attacker.wait_answered(stream, until)):
                break
        return attacker

    outcome = under_attack(server, attack)
    # Four answers of 1 MiB and their framing pass the 4 MiB the window may hold: from the
    # fifth on, new streams are refused. The held output does not move, so the write timeout
    # ends the connection.
    assert outcome.received.resets[http2.REFUSED_STREAM] == BLOCKED_CALLS - 4, outcome
    assert_withstood(outcome, goaway={CALM}, rss_growth=ZERO_WINDOW_RSS_GROWTH)


PING = http2.frame(http2.PING, 0, 0, b"hostile!")


@pytest.mark.parametrize("implementation", implementations(
    "grpc.aio sends GOAWAY ENHANCE_YOUR_CALM too_many_pings but goes on reading and "
    "acknowledging the flood (50,000 acknowledgements seen) and never closes the "
    "connection; on a loaded machine (the flood arriving slower) it has once closed it",
    strict=False))
def test_ping_flood(inferd: InferdHarness, implementation: str) -> None:
    server = serve(inferd, implementation)
    outcome = under_attack(server, flood(PING, reads=False), reads=False)
    assert_withstood(outcome, goaway={CALM})
    assert outcome.received.goaway is not None
    assert outcome.received.goaway[1] == b"too_many_pings", outcome


@pytest.mark.parametrize("implementation", implementations(
    "grpc.aio stops reading a connection whose SETTINGS acknowledgements pile up but never "
    "ends it"))
def test_settings_flood(inferd: InferdHarness, implementation: str) -> None:
    server = serve(inferd, implementation)
    settings = http2.settings_frame([(http2.ENABLE_PUSH, 0)])
    outcome = under_attack(server, flood(settings, reads=False), reads=False)
    assert_withstood(outcome, goaway={CALM})


BOMB_VALUE = b"a" * 4000  # with its name and 32, within the 4096-octet table
BOMB_REFERENCES = 4000  # 16 MB decoded from 4 KB of block


@pytest.mark.parametrize("implementation", implementations(
    "grpc.aio, its header-list limit not applied until its SETTINGS are acknowledged, "
    "decodes the bombs of the first 128 streams, growing by 100 to 120 MiB while the good "
    "client fell to between 0.004 and 0.6 of its quiet rate, and keeps the connection"))
def test_hpack_bomb(inferd: InferdHarness, implementation: str) -> None:
    server = serve(inferd, implementation)
    request = h2a.request_block("ServerLive")
    references = h2a.INDEXED_62 * BOMB_REFERENCES
    first = h2a.call_frames(1, request + h2a.indexed_into_table(b"x-bomb", BOMB_VALUE)
                            + references)

    def attack(server: ServerHandle, until: float) -> Attacker:
        attacker = Attacker(server.ports["grpc"], acknowledge=False)
        attacker.start_reading()
        # Later blocks use the entry the first put in the table: their literals are never
        # indexed.
        rest = (h2a.call_frames(stream, request + references) for stream in range(3, 1001, 2))
        if attacker.send(first, until):
            attacker.flood(rest, until)
        return attacker

    outcome = under_attack(server, attack)
    assert_withstood(outcome, goaway={CALM})


MANY_FIELDS = 258_000  # four octets each: a 1 MB block


@pytest.mark.parametrize("implementation", implementations(
    "grpc.aio, its header-list limit not applied until its SETTINGS are acknowledged, "
    "takes the 1 MB blocks whole, growing by 170 to 210 MiB while the good client fell to "
    "between 0.16 and 0.7 of its quiet rate, and keeps the connection"))
def test_header_list_of_a_quarter_million_fields(inferd: InferdHarness,
                                                 implementation: str) -> None:
    server = serve(inferd, implementation)
    block = h2a.request_block("ServerLive") + h2a.literal(b"x", b"") * MANY_FIELDS
    calls = [h2a.call_frames(stream, block) for stream in (1, 3, 5, 7)]
    outcome = under_attack(server, flood_of(lambda: calls, acknowledge=False))
    assert_withstood(outcome, goaway={CALM})


RESET_CALLS = 10_000  # HEADERS, DATA and RST_STREAM of about 320 bytes: 3.2 MB


@pytest.mark.parametrize("implementation", implementations(
    "grpc.aio refuses or cancels the streams but never ends the connection"))
def test_rapid_reset(inferd: InferdHarness, implementation: str) -> None:
    server = serve(inferd, implementation)
    message = h2a.grpc_message(simple_request())
    block = h2a.request_block("ModelInfer")
    pairs = [h2a.call_frames(stream, block, message)
             + http2.frame(http2.RST_STREAM, 0, stream, http2.CANCEL.to_bytes(4, "big"))
             for stream in range(1, 2 * RESET_CALLS, 2)]
    outcome = under_attack(server, flood_of(lambda: batched(pairs)))
    assert_withstood(outcome, goaway={CALM})


OPENED_STREAMS = 3000
MAX_STREAMS = 128


@pytest.mark.parametrize("implementation", implementations(
    "grpc.aio refuses the streams past its limit but never ends the connection"))
def test_streams_opened_without_limit(inferd: InferdHarness, implementation: str) -> None:
    server = serve(inferd, implementation)
    block = h2a.request_block("ModelInfer")  # headers only: each waits for its message
    streams = [h2a.header_frames(stream, block) for stream in range(1, 2 * OPENED_STREAMS, 2)]
    outcome = under_attack(server, flood_of(lambda: batched(streams)))
    received = outcome.received
    assert received.settings.get(http2.MAX_CONCURRENT_STREAMS) == MAX_STREAMS, outcome
    assert received.first_refused == 2 * MAX_STREAMS + 1, outcome
    # Refused streams are charged to the reset budget: 2,872 of them pass it.
    assert_withstood(outcome, goaway={CALM})


PIPELINED_CALLS = 50_000


@pytest.mark.parametrize("implementation", implementations(
    "grpc.aio stops reading the connection that never reads but keeps it open: nothing "
    "times it out"))
def test_many_pipelined_calls_never_read(inferd: InferdHarness, implementation: str) -> None:
    server = serve(inferd, implementation)
    block = h2a.request_block("ModelStatistics")  # an empty request: every model's statistics
    calls = [h2a.call_frames(stream, block) for stream in range(1, 2 * PIPELINED_CALLS, 2)]

    def attack(server: ServerHandle, until: float) -> Attacker:
        attacker = Attacker(server.ports["grpc"], receive_buffer=4096)
        attacker.flood(batched(calls), until)
        return attacker

    outcome = under_attack(server, attack, reads=False, send_secs=UNREAD_SEND_SECS,
                           end_secs=UNREAD_END_SECS)
    # Its output past the connection buffer, the server stops reading; the output does not
    # move, so the write timeout ends it; the GOAWAY waits behind what was never read.
    assert_withstood(outcome, goaway={CALM, None})


TINY_CONTINUATIONS = 100_000


@pytest.mark.parametrize("implementation", implementations(
    "grpc.aio takes a header block in any number of CONTINUATIONs (100,000 here) and keeps "
    "the connection"))
def test_tiny_continuation_frames(inferd: InferdHarness, implementation: str) -> None:
    server = serve(inferd, implementation)
    # A literal whose value comes one octet a frame.
    start = (h2a.request_block("ServerLive") + b"\x00" + h2a.string(b"x-pad")
             + encode_int(TINY_CONTINUATIONS, 7, 0x00))
    opening = http2.frame(http2.HEADERS, 0, 1, start)
    octet = http2.frame(http2.CONTINUATION, 0, 1, b"a")
    outcome = under_attack(server, flood(octet, TINY_CONTINUATIONS, opening=opening,
                                         acknowledge=False))
    assert_withstood(outcome, goaway={CALM})


EMPTY_OPENINGS = {
    # A header block left open.
    "continuation": (http2.frame(http2.HEADERS, 0, 1, h2a.request_block("ServerLive")),
                     http2.frame(http2.CONTINUATION, 0, 1)),
    # A call whose message never comes.
    "data": (h2a.header_frames(1, h2a.request_block("ModelInfer")),
             http2.frame(http2.DATA, 0, 1)),
}


@pytest.mark.parametrize("kind", sorted(EMPTY_OPENINGS))
@pytest.mark.parametrize("implementation", implementations(
    "grpc.aio ends the connection without a GOAWAY: after RST_STREAM INTERNAL_ERROR for "
    "empty CONTINUATIONs, after answering and resetting the call for empty DATA"))
def test_empty_frame_flood(inferd: InferdHarness, implementation: str, kind: str) -> None:
    server = serve(inferd, implementation)
    opening, empty = EMPTY_OPENINGS[kind]
    outcome = under_attack(server, flood(empty, opening=opening))
    assert_withstood(outcome, goaway={CALM})


@pytest.mark.parametrize("implementation", implementations(
    "grpc.aio ignores frames of unknown types (100,000 here) and keeps the connection"))
def test_unknown_frame_type_flood(inferd: InferdHarness, implementation: str) -> None:
    server = serve(inferd, implementation)
    outcome = under_attack(server, flood(http2.frame(0xFA, 0, 0, b"unknown!")))
    assert_withstood(outcome, goaway={CALM})


@pytest.mark.parametrize("implementation", implementations(
    "grpc.aio ignores PRIORITY frames (100,000 here) and keeps the connection"))
def test_priority_flood(inferd: InferdHarness, implementation: str) -> None:
    server = serve(inferd, implementation)
    # On idle streams, each depending on the root: valid, and opening nothing.
    priorities = b"".join(http2.frame(http2.PRIORITY, 0, stream, b"\x00\x00\x00\x00\x0f")
                          for stream in range(1, 2000, 2))
    outcome = under_attack(server, flood(priorities, FLOOD_FRAMES // 1000))
    assert_withstood(outcome, goaway={CALM})


# Characters whose Huffman codes are 15 to 19 bits: about two coded octets a character, a
# header list of 12 KB (within the 16 KiB limit) in a 24 KB block.
HUFFMAN_VALUE = b"\\{<`" * 3000
HUFFMAN_CALLS = 400  # 9.6 MB coded, past the loop server's budget (4 MiB, then 0.4 MiB/s)
IN_FLIGHT = 64


@pytest.mark.parametrize("implementation", implementations(
    "grpc.aio decodes any amount of Huffman-coded headers and keeps the connection"))
def test_huffman_heavy_header_blocks(inferd: InferdHarness, implementation: str) -> None:
    server = serve(inferd, implementation)
    block = h2a.request_block("ServerLive") + h2a.literal(b"x-huffman", HUFFMAN_VALUE,
                                                           huffman=True)

    def attack(server: ServerHandle, until: float) -> Attacker:
        attacker = Attacker(server.ports["grpc"])
        attacker.start_reading()
        for number, stream in enumerate(range(1, 2 * HUFFMAN_CALLS, 2)):
            # Valid calls, kept under the stream limit so that only Huffman work is judged.
            if not (attacker.wait_closed_count(number - IN_FLIGHT, until)
                    and attacker.send(h2a.call_frames(stream, block), until)):
                break
        return attacker

    outcome = under_attack(server, attack)
    assert_withstood(outcome, goaway={CALM})


# Past the 16 KiB header list limit, short of four times it (the bound of a bomb): each call
# is refused on its own and the connection stays.
OVERSIZED_VALUE = b"v" * 20_000
OVERSIZED_CALLS = 8


@pytest.mark.parametrize("implementation", implementations())
def test_header_lists_over_the_limit_are_refused_one_by_one(inferd: InferdHarness,
                                                            implementation: str) -> None:
    server = serve(inferd, implementation)
    block = h2a.request_block("ServerLive") + h2a.literal(b"x-large", OVERSIZED_VALUE)

    def attack(server: ServerHandle, until: float) -> Attacker:
        attacker = Attacker(server.ports["grpc"], decode_headers=True)
        attacker.start_reading()
        for stream in range(1, 2 * OVERSIZED_CALLS, 2):
            if not (attacker.send(h2a.call_frames(stream, block), until)
                    and attacker.wait_closed(stream, until)):
                break
        return attacker

    # The calls are counted, not timed: the attacker may take far longer than the measured
    # window to see all eight answered (a loaded CI machine saw seven within it on grpcio).
    outcome = under_attack(server, attack, send_secs=WAIT_SECS, end_secs=0.5)  # must not end it
    # Each call answered RESOURCE_EXHAUSTED, never served.
    assert outcome.received.statuses == {"8": OVERSIZED_CALLS}, outcome
    assert_withstood(outcome, goaway={None}, ends=False)


BOMB_INFLATED = 256 * MIB
MAX_INPUT = MIB
BOMBS = 8  # 261 KB each
# A quarter of what one bomb inflates to: the message must be refused as it inflates.
GZIP_RSS_GROWTH = BOMB_INFLATED // 4


@functools.cache
def gzip_bomb() -> bytes:
    """A ModelInferRequest for identity_fp32 with 256 MiB of zeros, gzip-compressed (about
    261 KB), compressed piece by piece."""
    values = BOMB_INFLATED // 4
    request = service_pb2.ModelInferRequest(model_name="identity_fp32")
    request.inputs.add(name="INPUT0", datatype="FP32", shape=[values])
    head = request.SerializeToString()
    # raw_input_contents (field 7, length-delimited) and its length, the zeros following.
    length, varint = BOMB_INFLATED, bytearray()
    while length >= 0x80:
        varint.append(length & 0x7F | 0x80)
        length >>= 7
    varint.append(length)
    compressor = zlib.compressobj(9, zlib.DEFLATED, 31)
    out = [compressor.compress(head + b"\x3a" + bytes(varint))]
    zeros = bytes(MIB)
    out += [compressor.compress(zeros) for _ in range(BOMB_INFLATED // MIB)]
    out.append(compressor.flush())
    return b"".join(out)


@pytest.mark.parametrize("implementation", implementations())
def test_gzip_bomb(inferd: InferdHarness, implementation: str) -> None:
    server = serve(inferd, implementation, f"--grpc-max-input-size={MAX_INPUT}",
                   models=("simple", "identity_fp32"))
    message = h2a.grpc_message(gzip_bomb(), compressed=True)
    assert len(message) < MAX_INPUT
    block = h2a.request_block("ModelInfer", [(b"grpc-encoding", b"gzip")])

    def attack(server: ServerHandle, until: float) -> Attacker:
        attacker = Attacker(server.ports["grpc"], decode_headers=True)
        attacker.start_reading()
        for stream in range(1, 2 * BOMBS, 2):
            if not (attacker.send(h2a.header_frames(stream, block), until)
                    and attacker.send_message(stream, message, until)
                    and attacker.wait_closed(stream, until)):
                break
        return attacker

    outcome = under_attack(server, attack, end_secs=0.5)  # which must not end it
    statuses = outcome.received.statuses
    # Each refused RESOURCE_EXHAUSTED; the connection is not the server's to end.
    assert statuses and set(statuses) == {"8"}, outcome
    assert_withstood(outcome, goaway={None}, rss_growth=GZIP_RSS_GROWTH, ends=False)
