"""HPACK as the loop gRPC server decodes and encodes it, from RFC 7541's text: appendix C's
examples with the dynamic table after each block, where a table size update may stand (4.2),
how a Huffman-coded string must end (5.2), malformed blocks; then the bounds a hostile peer
meets (RFC 9113 section 6.5.2's header list size, an HPACK bomb), the cache of repeated
blocks, and properties: the Huffman decoder inverts an encoder written here from appendix
B's table and agrees with a bit-at-a-time reference decoder on any input."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from inferd.protocols.http2 import hpack, huffman
from inferd.protocols.http2.hpack import (
    HeaderDecoder,
    HeaderListTooLarge,
    HpackError,
    huffman_decode,
)

# ------------------------------------------------------------------ appendix B, here

CODES = huffman.CODES
EOS = 256


def huffman_encode(data: bytes) -> bytes:
    """Section 5.2: the codes of ``data``'s octets, then EOS's leading ones to an octet."""
    out = bytearray()
    bits = 0
    count = 0
    for octet in data:
        code, length = CODES[octet]
        bits = (bits << length) | code
        count += length
        while count >= 8:
            count -= 8
            out.append((bits >> count) & 0xFF)
        bits &= (1 << count) - 1
    if count:
        out.append(((bits << (8 - count)) | ((1 << (8 - count)) - 1)) & 0xFF)
    return bytes(out)


SYMBOL_OF = {(length, code): symbol for symbol, (code, length) in enumerate(CODES)}


def reference_decode(data: bytes) -> bytes:
    """One bit at a time against appendix B's table: the obvious decoder, slow and clear."""
    out = bytearray()
    code = 0
    length = 0
    for octet in data:
        for shift in range(7, -1, -1):
            code = (code << 1) | ((octet >> shift) & 1)
            length += 1
            symbol = SYMBOL_OF.get((length, code))
            if symbol is None:
                continue
            if symbol == EOS:
                raise HpackError("EOS")
            out.append(symbol)
            code = length = 0
    if length > 7 or code != (1 << length) - 1:
        raise HpackError("padding")
    return bytes(out)


def test_the_code_table_is_appendix_b() -> None:
    # Appendix B's code is canonical: sorted by (length, symbol), each code is the one before
    # plus one, shifted left by the growth in length. That and a few rows read off the RFC
    # catch a mistyped row.
    assert len(CODES) == 257
    expected = 0
    previous = 0
    for symbol in sorted(range(257), key=lambda s: (CODES[s][1], s)):
        code, length = CODES[symbol]
        expected <<= length - previous
        assert code == expected, symbol
        expected += 1
        previous = length
    assert expected == 1 << 30  # the code is complete: every 30-bit string decodes
    assert CODES[ord("0")] == (0x0, 5) and CODES[ord("a")] == (0x3, 5)
    assert CODES[ord(" ")] == (0x14, 6) and CODES[ord("~")] == (0x1ffd, 13)
    assert CODES[0] == (0x1ff8, 13) and CODES[255] == (0x3ffffee, 26)
    assert CODES[EOS] == (0x3fffffff, 30)


# ------------------------------------------------------------------ appendix C

def test_c2_the_four_field_representations() -> None:
    decoder = HeaderDecoder()
    assert decoder.decode(bytes.fromhex(  # C.2.1: literal with indexing
        "400a637573746f6d2d6b65790d637573746f6d2d686561646572")) == (
        ("custom-key", "custom-header"),)
    assert decoder.table == (("custom-key", "custom-header"),) and decoder.table_size == 55
    decoder = HeaderDecoder()
    assert decoder.decode(bytes.fromhex("040c2f73616d706c652f70617468")) == (
        (":path", "/sample/path"),)  # C.2.2: without indexing
    assert decoder.decode(bytes.fromhex("100870617373776f726406736563726574")) == (
        ("password", "secret"),)  # C.2.3: never indexed
    assert decoder.decode(bytes.fromhex("82")) == ((":method", "GET"),)  # C.2.4: indexed
    assert decoder.table == () and decoder.table_size == 0


REQUESTS = [
    ((":method", "GET"), (":scheme", "http"), (":path", "/"),
     (":authority", "www.example.com")),
    ((":method", "GET"), (":scheme", "http"), (":path", "/"),
     (":authority", "www.example.com"), ("cache-control", "no-cache")),
    ((":method", "GET"), (":scheme", "https"), (":path", "/index.html"),
     (":authority", "www.example.com"), ("custom-key", "custom-value")),
]
REQUEST_TABLES = [
    (((":authority", "www.example.com"),), 57),
    ((("cache-control", "no-cache"), (":authority", "www.example.com")), 110),
    ((("custom-key", "custom-value"), ("cache-control", "no-cache"),
      (":authority", "www.example.com")), 164),
]
RESPONSES = [
    ((":status", "302"), ("cache-control", "private"),
     ("date", "Mon, 21 Oct 2013 20:13:21 GMT"), ("location", "https://www.example.com")),
    ((":status", "307"), ("cache-control", "private"),
     ("date", "Mon, 21 Oct 2013 20:13:21 GMT"), ("location", "https://www.example.com")),
    ((":status", "200"), ("cache-control", "private"),
     ("date", "Mon, 21 Oct 2013 20:13:22 GMT"), ("location", "https://www.example.com"),
     ("content-encoding", "gzip"),
     ("set-cookie", "foo=ASDJKHQKBZXOQWEOPIUAXQWEOIU; max-age=3600; version=1")),
]
RESPONSE_TABLES = [  # SETTINGS_HEADER_TABLE_SIZE 256: the second and third blocks evict
    ((("location", "https://www.example.com"), ("date", "Mon, 21 Oct 2013 20:13:21 GMT"),
      ("cache-control", "private"), (":status", "302")), 222),
    (((":status", "307"), ("location", "https://www.example.com"),
      ("date", "Mon, 21 Oct 2013 20:13:21 GMT"), ("cache-control", "private")), 222),
    ((("set-cookie", "foo=ASDJKHQKBZXOQWEOPIUAXQWEOIU; max-age=3600; version=1"),
      ("content-encoding", "gzip"), ("date", "Mon, 21 Oct 2013 20:13:22 GMT")), 215),
]


@pytest.mark.parametrize(("limit", "blocks", "lists", "tables", "huffman_bytes"), [
    pytest.param(4096, ["828684410f7777772e6578616d706c652e636f6d",
                        "828684be58086e6f2d6361636865",
                        "828785bf400a637573746f6d2d6b65790c637573746f6d2d76616c7565"],
                 REQUESTS, REQUEST_TABLES, [0, 0, 0], id="C.3"),
    pytest.param(4096, ["828684418cf1e3c2e5f23a6ba0ab90f4ff", "828684be5886a8eb10649cbf",
                        "828785bf408825a849e95ba97d7f8925a849e95bb8e8b4bf"],
                 REQUESTS, REQUEST_TABLES, [12, 18, 35], id="C.4"),
    pytest.param(256, [
        "4803333032580770726976617465611d4d6f6e2c203231204f637420323031332032303a31333a3231"
        "20474d546e1768747470733a2f2f7777772e6578616d706c652e636f6d",
        "4803333037c1c0bf",
        "88c1611d4d6f6e2c203231204f637420323031332032303a31333a323220474d54c05a04677a6970"
        "7738666f6f3d4153444a4b48514b425a584f5157454f50495541585157454f49553b206d61782d6167"
        "653d333630303b2076657273696f6e3d31"],
        RESPONSES, RESPONSE_TABLES, [0, 0, 0], id="C.5"),
    pytest.param(256, [
        "488264025885aec3771a4b6196d07abe941054d444a8200595040b8166e082a62d1bff6e919d29ad17"
        "1863c78f0b97c8e9ae82ae43d3",
        "4883640effc1c0bf",
        "88c16196d07abe941054d444a8200595040b8166e084a62d1bffc05a839bd9ab77ad94e7821dd7f2e6"
        "c7b335dfdfcd5b3960d5af27087f3672c1ab270fb5291f9587316065c003ed4ee5b1063d5007"],
        RESPONSES, RESPONSE_TABLES, [46, 49, 119], id="C.6"),
])
def test_appendix_c_sequences_and_the_dynamic_table_after_each_block(
        limit: int, blocks: list[str], lists: list[hpack.Headers],
        tables: list[tuple[hpack.Headers, int]], huffman_bytes: list[int]) -> None:
    decoder = HeaderDecoder(limit)
    for block, expected, (table, size), counted in zip(
            blocks, lists, tables, huffman_bytes, strict=True):
        assert decoder.decode(bytes.fromhex(block)) == expected
        assert decoder.table == table
        assert decoder.table_size == size
        assert decoder.huffman_bytes == counted


# ------------------------------------------------------------------ section 4.2

def test_a_table_size_update_may_open_a_block_once_or_twice() -> None:
    decoder = HeaderDecoder()
    decoder.decode(bytes.fromhex("828684410f7777772e6578616d706c652e636f6d"))
    assert decoder.decode(bytes([0x20, 0x3F, 0xE1, 0x1F, 0x82])) == ((":method", "GET"),)
    assert decoder.table == ()  # emptied by the update to 0, then allowed 4096 again
    assert decoder.decode(bytes([0x3F, 0x01, 0x82])) == ((":method", "GET"),)  # 32, alone
    decoder.decode(bytes.fromhex("4001610162"))  # ("a", "b"): 34 octets, more than 32
    assert decoder.table == ()


@pytest.mark.parametrize("block", [
    bytes([0x82, 0x20]),  # after a field
    bytes([0x20, 0x82, 0x20, 0x82]),
    bytes([0x20, 0x20, 0x20, 0x82]),  # a third: 4.2 allows the smallest and the final size
    bytes([0x3F, 0xE2, 0x1F]),  # 4097, above SETTINGS_HEADER_TABLE_SIZE
], ids=["after a field", "between fields", "three", "above the limit"])
def test_a_table_size_update_anywhere_else_is_an_error(block: bytes) -> None:
    with pytest.raises(HpackError):
        HeaderDecoder().decode(block)


def test_a_size_update_opens_each_block_not_only_the_first() -> None:
    decoder = HeaderDecoder()
    decoder.decode(bytes([0x82]))
    assert decoder.decode(bytes([0x20, 0x83])) == ((":method", "POST"),)


# ------------------------------------------------------------------ section 5.2

def test_huffman_padding_up_to_seven_bits_of_eos_is_allowed() -> None:
    assert huffman_decode(b"") == b""
    assert huffman_decode(bytes([0x1F])) == b"a"  # 00011, then 111
    assert huffman_decode(bytes([0x00, 0x3F])) == b"00"  # 00000 00000, then 111111
    assert huffman_decode(huffman_encode(b"www.example.com")) == b"www.example.com"


@pytest.mark.parametrize("data", [
    bytes([0xFF]),  # eight bits of padding and no symbol
    bytes([0x1F, 0xFF]),  # "a", then eleven ones
    bytes([0x18]),  # "a", then 000: not EOS's prefix
    bytes([0x1E]),  # "a", then 110
    bytes([0xFF, 0xFF, 0xFF, 0xFF]),  # EOS (30 ones), then two ones
    bytes([0x1F, 0xFF, 0xFF, 0xFF, 0xFE]),  # "a", then EOS, then 00... (EOS in mid-string)
    huffman_encode(b"\x0a")[:-1],  # a 30-bit code cut short
], ids=["8 ones", "11 ones", "zeros", "110", "EOS", "EOS inside", "cut"])
def test_bad_huffman_padding_and_eos_are_errors(data: bytes) -> None:
    with pytest.raises(HpackError):
        huffman_decode(data)
    with pytest.raises(HpackError):  # and through a header block, as a value
        HeaderDecoder().decode(bytes([0x00, 0x01, 0x78, 0x80 | len(data)]) + data)


# ------------------------------------------------------------------ malformed blocks

@pytest.mark.parametrize("block", [
    bytes([0x80]),  # 6.1: index 0
    bytes([0x80 | 62]),  # past an empty dynamic table
    bytes([0x40 | 62, 0x00]),  # a literal whose name index is past the table
    bytes([0x3F, 0xFF]),  # an integer cut short
    bytes([0xFF, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x00]),  # six continuation octets
    bytes([0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0x0F]),  # an index of 2**35: not in the table
    bytes.fromhex("0085ffffffffff"),  # a name of five octets of padding
    bytes([0x00, 0x05, 0x61]),  # a string longer than the block
    bytes([0x00]),  # a literal cut before its name
])
def test_a_malformed_block_is_refused(block: bytes) -> None:
    with pytest.raises(HpackError):
        HeaderDecoder().decode(block)


# ------------------------------------------------------------------ RFC 9113 section 6.5.2

def literal(name: bytes, value: bytes, indexed: bool = True) -> bytes:
    """A literal field with a new name, raw strings (lengths under 127)."""
    return bytes([0x40 if indexed else 0x00, len(name)]) + name + bytes([len(value)]) + value


def test_a_list_up_to_the_limit_decodes_and_one_octet_more_is_refused() -> None:
    block = literal(b"k", b"v" * 67)  # 1 + 67 + 32 = 100
    assert HeaderDecoder(max_list_size=100).decode(block) == (("k", "v" * 67),)
    with pytest.raises(HeaderListTooLarge) as refused:
        HeaderDecoder(max_list_size=99).decode(block)
    assert (refused.value.size, refused.value.limit, refused.value.fatal) == (100, 99, False)


def test_a_refused_list_leaves_the_table_in_step_with_the_peer() -> None:
    decoder = HeaderDecoder(max_list_size=250)
    block = (literal(b"a", b"x" * 100) + bytes([0x82]) * 3  # 133 + 3 * 42: passes 250
             + literal(b"b", b"y" * 50) + literal(b"c", b"z", indexed=False))  # decoded still
    with pytest.raises(HeaderListTooLarge) as refused:
        decoder.decode(block)
    assert not isinstance(refused.value, HpackError)
    assert (refused.value.size, refused.value.fatal) == (133 + 3 * 42 + 83 + 34, False)
    assert decoder.table == (("b", "y" * 50), ("a", "x" * 100))
    # The next block refers to both entries the refused one added (217 octets).
    assert decoder.decode(bytes([0x80 | 62, 0x80 | 63])) == (("b", "y" * 50), ("a", "x" * 100))


def test_a_refused_block_is_not_answered_from_the_cache() -> None:
    decoder = HeaderDecoder(max_list_size=100)
    block = bytes([0x82]) * 3  # 126, no change to the table
    for _ in range(2):
        with pytest.raises(HeaderListTooLarge):
            decoder.decode(block)


def test_an_hpack_bomb_is_fatal_before_the_block_ends() -> None:
    # One 4 KiB entry, referenced by one octet 60,000 times: 240 MB decoded by 6.5.2's
    # measure. The block ends in an index 0, which a decoder that went on to the end would
    # refuse as malformed instead.
    entry = b"\x40\x01x" + hpack.encode_int(4000, 7, 0) + b"v" * 4000
    bomb = entry + bytes([0x80 | 62]) * 60_000 + bytes([0x80])
    decoder = HeaderDecoder(max_list_size=16384)
    with pytest.raises(HeaderListTooLarge) as refused:
        decoder.decode(bomb)
    assert refused.value.fatal and refused.value.limit == 16384
    assert 4 * 16384 < refused.value.size <= 4 * 16384 + 4033


def test_a_string_longer_than_the_bomb_bound_is_fatal_before_it_is_decoded() -> None:
    value = b"v" * 70_000
    block = b"\x00\x01x" + hpack.encode_int(len(value), 7, 0) + value
    with pytest.raises(HeaderListTooLarge) as refused:
        HeaderDecoder(max_list_size=16384).decode(block)
    assert refused.value.fatal
    # 30 bits a symbol: at least 20,000 octets decoded. The string ends in bad padding,
    # which decoding it would find.
    coded = huffman_encode(b"\x0a" * 20_000) + b"\x00"
    block = b"\x00\x01x" + hpack.encode_int(len(coded), 7, 0x80) + coded
    with pytest.raises(HeaderListTooLarge) as refused:
        HeaderDecoder(max_list_size=4096).decode(block)
    assert refused.value.fatal


def test_huffman_octets_are_counted_even_when_they_do_not_decode() -> None:
    decoder = HeaderDecoder()
    with pytest.raises(HpackError):
        decoder.decode(bytes([0x00, 0x01, 0x78, 0x82, 0xFF, 0xFF]))
    assert decoder.huffman_bytes == 2


# ------------------------------------------------------------------ the cache

def test_a_repeated_block_is_decoded_against_the_table_as_it_is_now() -> None:
    decoder = HeaderDecoder()
    decoder.decode(bytes.fromhex("400a637573746f6d2d6b65790d637573746f6d2d686561646572"))
    reference = bytes([0x80 | 62])  # the newest dynamic entry
    assert decoder.decode(reference) == (("custom-key", "custom-header"),)
    decoder.decode(bytes.fromhex("4001610162"))  # a new entry: index 62 is now ("a", "b")
    assert decoder.decode(reference) == (("a", "b"),)


# ------------------------------------------------------------------ properties

@given(st.binary(max_size=300))
def test_the_huffman_decoder_inverts_appendix_b(data: bytes) -> None:
    assert huffman_decode(huffman_encode(data)) == data


def _decoded_or_error(decode: object, data: bytes) -> bytes | None:
    assert callable(decode)
    try:
        result = decode(data)
    except HpackError:
        return None
    assert isinstance(result, bytes)
    return result


def _mangled(draw: st.DrawFn) -> bytes:
    data = bytearray(huffman_encode(draw(st.binary(max_size=40))))
    for _ in range(draw(st.integers(0, 3))):
        if data and draw(st.booleans()):
            data[draw(st.integers(0, len(data) - 1))] ^= 1 << draw(st.integers(0, 7))
        else:
            data += draw(st.binary(min_size=1, max_size=4))
    if data and draw(st.booleans()):
        del data[draw(st.integers(0, len(data) - 1)):]
    return bytes(data)


mangled = st.composite(_mangled)


@settings(max_examples=500)
@given(st.one_of(st.binary(max_size=64), mangled(),
                 st.lists(st.sampled_from([b"\xff", b"\xfe", b"\x7f", b"\x00"]), max_size=8)
                 .map(b"".join)))
def test_the_huffman_decoder_agrees_with_the_reference(data: bytes) -> None:
    assert _decoded_or_error(huffman_decode, data) == _decoded_or_error(reference_decode, data)


@settings(max_examples=300)
@given(st.binary(max_size=200), st.integers(40, 400))
def test_any_block_decodes_or_raises_one_of_the_two_errors(block: bytes, limit: int) -> None:
    decoder = HeaderDecoder(limit=256, max_list_size=limit)
    try:
        headers = decoder.decode(block)
    except HpackError:
        return
    except HeaderListTooLarge as refused:
        assert refused.size > limit
        return
    assert sum(len(name) + len(value) + 32 for name, value in headers) <= limit


@given(st.lists(st.tuples(st.sampled_from([":status", "content-type", "grpc-status", "x-y"]),
                          st.text(st.characters(min_codepoint=32, max_codepoint=126),
                                  max_size=300)), max_size=8))
def test_what_is_encoded_decodes_to_itself(fields: list[tuple[str, str]]) -> None:
    decoder = HeaderDecoder(max_list_size=1 << 20)
    assert decoder.decode(hpack.encode_headers(fields)) == tuple(fields)
