"""HPACK's decoder against what a hostile client sends it, pure Python beside compiled.

Huffman rows time ``huffman_decode`` on three inputs and give the rate in MB/s of coded
input (the octets a peer sends, which is what the decoder's ``huffman_bytes`` counts): the
five short values of a typical gRPC request, a 1 KiB bearer token (base64url, 5-7-bit codes)
and 4 KiB of octets whose codes are 28 to 30 bits long (the slowest symbols for a decoder
that walks code lengths). Block rows time one ``HeaderDecoder().decode`` of a 256 KiB block
(the most the loop server buffers) that ends either in a result or in the decoder's refusal:
an HPACK bomb (one 4 KiB table entry, then a one-octet reference to it over and over) and
258k one-octet references to the static ``:method: GET``. Like ``compiled.py``, each
build runs in its own child process (``INFERD_COMPILE=0`` for pure), the two alternate
``--rounds`` times and the least CPU time per call is kept. A script, not a test.

    .venv/bin/python -m bench.performance.hpack [--rounds 3] [--repeats 5] [--seconds 0.2]
"""

from __future__ import annotations

import argparse
import base64
import json
import random
from typing import Any

from bench.common.pure_or_compiled import Step, cpu_microseconds, run_child

MODULE = "bench.performance.hpack"
BLOCK = 256 * 2**10


def _huffman_encode(data: bytes) -> bytes:
    from inferd.protocols.http2.huffman import CODES as _HUFFMAN_CODES

    bits = 0
    count = 0
    for byte in data:
        code, length = _HUFFMAN_CODES[byte]
        bits = (bits << length) | code
        count += length
    padding = -count % 8
    bits = (bits << padding) | ((1 << padding) - 1)  # EOS's most significant bits
    return bits.to_bytes((count + padding) // 8, "big")


def _long_code_octets(size: int) -> bytes:
    from inferd.protocols.http2.huffman import CODES as _HUFFMAN_CODES

    slow = [symbol for symbol, (_, length) in enumerate(_HUFFMAN_CODES[:256]) if length >= 28]
    generator = random.Random(7541)
    return bytes(generator.choice(slow) for _ in range(size))


def _steps() -> dict[str, tuple[Step, int]]:
    """Each row's step and the octets of input it decodes per call."""
    from inferd.protocols.http2.hpack import HeaderDecoder, encode_int, huffman_decode

    request_values = [_huffman_encode(value) for value in (
        b"/inference.GRPCInferenceService/ModelInfer", b"localhost:8001",
        b"application/grpc", b"trailers", b"grpc-python/1.62.1 grpc-c/39.0.0 (linux; chttp2)",
    )]
    token = b"Bearer " + base64.urlsafe_b64encode(random.Random(1).randbytes(760)).rstrip(b"=")
    token_coded = _huffman_encode(token[:1024])
    worst = _huffman_encode(_long_code_octets(1100))[:4096]
    while True:  # cut on a whole symbol so that the padding is valid
        try:
            huffman_decode(worst)
            break
        except ValueError:
            worst = worst[:-1]

    def request() -> object:
        for value in request_values:
            huffman_decode(value)
        return None

    entry = b"\x40\x01x" + encode_int(4000, 7, 0) + b"v" * 4000  # literal, indexed
    bomb = entry + b"\xbe" * (BLOCK - len(entry))
    fields = b"\x82" * BLOCK

    def block(data: bytes) -> Step:
        def decode() -> object:
            try:
                return HeaderDecoder().decode(data)
            except Exception as error:  # the hardened decoder's refusal
                return error
        return decode

    return {
        "Huffman: gRPC request's 5 values": (request, sum(map(len, request_values))),
        "Huffman: 1 KiB bearer token": (lambda: huffman_decode(token_coded), len(token_coded)),
        "Huffman: 28-30-bit codes": (lambda: huffman_decode(worst), len(worst)),
        "block: HPACK bomb, 256 KiB": (block(bomb), len(bomb)),
        "block: 258k references, 256 KiB": (block(fields), len(fields)),
    }


def _child(seconds: float, repeats: int) -> None:
    from inferd.protocols import build

    rows = {name: [cpu_microseconds(step, seconds, repeats), octets]
            for name, (step, octets) in _steps().items()}
    print(json.dumps({"build": build.describe(), "rows": rows}))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seconds", type=float, default=0.2, help="length of one timing")
    parser.add_argument("--repeats", type=int, default=5, help="timings per row (least)")
    parser.add_argument("--rounds", type=int, default=3, help="alternating pure/compiled runs")
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    options = parser.parse_args()
    if options.child:
        _child(options.seconds, options.repeats)
        return
    runs: dict[bool, list[dict[str, Any]]] = {False: [], True: []}
    for _ in range(options.rounds):
        for compiled in (False, True):
            runs[compiled].append(run_child(MODULE, compiled, options.seconds, options.repeats))
    print(f"pure:     {runs[False][0]['build']}")
    print(f"compiled: {runs[True][0]['build']}")
    names = list(runs[False][0]["rows"])
    width = max(map(len, names))
    print(f"\n{'row':<{width}}  {'octets':>7}  {'pure µs':>9}  {'MB/s':>7}"
          f"  {'compiled µs':>11}  {'MB/s':>7}")
    for name in names:
        octets = runs[False][0]["rows"][name][1]
        pure = min(run["rows"][name][0] for run in runs[False])
        compiled = min(run["rows"][name][0] for run in runs[True])
        print(f"{name:<{width}}  {octets:7d}  {pure:9.1f}  {octets / pure:7.2f}"
              f"  {compiled:11.1f}  {octets / compiled:7.2f}")


if __name__ == "__main__":
    main()
