"""Tests of inferd.protocols.kserve_http.content_coding: Accept-Encoding choice, compression, and
the bounded streaming decoder of request bodies."""

from __future__ import annotations

import gzip
import zlib

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from inferd.protocols.kserve_http.content_coding import (
    BodyDecoder,
    choose_response_coding,
    compress,
)
from inferd.protocols.errors import InvalidArgument


def raw_deflate(data: bytes) -> bytes:
    compressor = zlib.compressobj(6, zlib.DEFLATED, -zlib.MAX_WBITS)
    return compressor.compress(data) + compressor.flush()


ENCODERS = {"gzip": gzip.compress, "deflate": zlib.compress, "raw-deflate": raw_deflate}


def decode_in_chunks(coding: str, body: bytes, chunk: int, limit: int = 10**7) -> bytes:
    decoder = BodyDecoder(coding, limit)
    parts = [bytes(decoder.feed(body[i : i + chunk])) for i in range(0, len(body), chunk)]
    return b"".join(parts) + decoder.finish()


@settings(max_examples=50, deadline=None)
@given(st.binary(max_size=5000), st.sampled_from(sorted(ENCODERS)), st.integers(1, 700))
def test_decoding_any_chunking_gives_the_body_back(data: bytes, name: str, chunk: int) -> None:
    coding = "gzip" if name == "gzip" else "deflate"
    assert decode_in_chunks(coding, ENCODERS[name](data), chunk) == data


@given(st.binary(max_size=2000), st.sampled_from(["gzip", "deflate"]))
def test_compress_round_trips(data: bytes, coding: str) -> None:
    body = compress([data[:10], memoryview(data[10:])], coding)
    assert (gzip.decompress(body) if coding == "gzip" else zlib.decompress(body)) == data


def test_a_bomb_stops_at_the_limit() -> None:
    bomb = gzip.compress(b"\0" * (32 * 2**20))
    with pytest.raises(InvalidArgument, match="decompresses to more than the maximum input size"):
        decode_in_chunks("gzip", bomb, 65536, limit=2**20)
    with pytest.raises(InvalidArgument, match="larger than the maximum input size of 4 bytes"):
        decode_in_chunks("identity", b"12345", 2, limit=4)


def test_malformed_bodies() -> None:
    with pytest.raises(InvalidArgument, match="unsupported Content-Encoding 'br'"):
        BodyDecoder("br", 10)
    with pytest.raises(InvalidArgument, match="not valid gzip data"):
        decode_in_chunks("gzip", b"plain text", 100)
    with pytest.raises(InvalidArgument, match="the gzip request body is truncated"):
        decode_in_chunks("gzip", gzip.compress(b"x" * 100)[:-4], 100)
    with pytest.raises(InvalidArgument, match="data after the end of its deflate stream"):
        decode_in_chunks("deflate", zlib.compress(b"x") + b"tail", 100)
    assert decode_in_chunks("gzip", gzip.compress(b"ab") + gzip.compress(b"cd"), 3) == b"abcd"
    assert decode_in_chunks("x-gzip", gzip.compress(b"ab"), 3) == b"ab"
    assert decode_in_chunks("", b"as is", 2) == b"as is"


@pytest.mark.parametrize(("header", "coding"), [
    (None, "identity"), ("", "identity"), ("gzip", "gzip"), ("deflate", "deflate"),
    ("br, gzip", "gzip"), ("gzip;q=0.2, deflate;q=0.8", "deflate"), ("identity, gzip", "identity"),
    ("gzip;q=0", "identity"), ("br", "identity"), ("GZIP;q=bad, deflate", "deflate"),
])
def test_response_coding_choice(header: str | None, coding: str) -> None:
    assert choose_response_coding(header) == coding
