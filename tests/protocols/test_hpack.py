"""HPACK as the loop gRPC server decodes and encodes it: RFC 7541's own examples, the cache
of repeated blocks against a changing table, malformed blocks, and a round trip."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from inferd.protocols import hpack
from inferd.protocols.hpack import HeaderDecoder, HpackError


def test_rfc7541_c3_requests_without_huffman_share_the_dynamic_table() -> None:
    decoder = HeaderDecoder()
    first = decoder.decode(bytes.fromhex("828684410f7777772e6578616d706c652e636f6d"))
    assert first == ((":method", "GET"), (":scheme", "http"), (":path", "/"),
                     (":authority", "www.example.com"))
    second = decoder.decode(bytes.fromhex("828684be58086e6f2d6361636865"))
    assert second[-1] == ("cache-control", "no-cache")
    assert second[3] == (":authority", "www.example.com")


def test_rfc7541_c4_requests_with_huffman() -> None:
    decoder = HeaderDecoder()
    decoder.decode(bytes.fromhex("828684418cf1e3c2e5f23a6ba0ab90f4ff"))
    decoder.decode(bytes.fromhex("828684be5886a8eb10649cbf"))
    third = decoder.decode(
        bytes.fromhex("828785bf408825a849e95ba97d7f8925a849e95bb8e8b4bf"))
    assert third == ((":method", "GET"), (":scheme", "https"), (":path", "/index.html"),
                     (":authority", "www.example.com"), ("custom-key", "custom-value"))


def test_a_repeated_block_is_decoded_against_the_table_as_it_is_now() -> None:
    decoder = HeaderDecoder()
    decoder.decode(bytes.fromhex("400a637573746f6d2d6b65790d637573746f6d2d686561646572"))
    reference = bytes([0x80 | 62])  # the newest dynamic entry
    assert decoder.decode(reference) == (("custom-key", "custom-header"),)
    decoder.decode(bytes.fromhex("4001610162"))  # a new entry: index 62 is now ("a", "b")
    assert decoder.decode(reference) == (("a", "b"),)


@pytest.mark.parametrize("block", [bytes([0x80]), bytes([0x80 | 70]), bytes([0x3F, 0xFF]),
                                   bytes.fromhex("0085ffffffffff")])
def test_a_malformed_block_is_refused(block: bytes) -> None:
    with pytest.raises(HpackError):
        HeaderDecoder().decode(block)


@given(st.lists(st.tuples(st.sampled_from([":status", "content-type", "grpc-status", "x-y"]),
                          st.text(st.characters(min_codepoint=32, max_codepoint=126),
                                  max_size=300)), max_size=8))
def test_what_is_encoded_decodes_to_itself(fields: list[tuple[str, str]]) -> None:
    assert HeaderDecoder().decode(hpack.encode_headers(fields)) == tuple(fields)
