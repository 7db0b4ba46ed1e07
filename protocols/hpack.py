"""HPACK (RFC 7541) for the loop gRPC server's HTTP/2 (``inferd.protocols.http2``): the
decoder of one connection's header blocks, with the peer's dynamic table and Huffman-coded
strings, and an encoder that uses neither.

The decoder is written for a hostile peer. It measures each decoded header list as RFC 9113
section 6.5.2 does (per field, name and value octets plus 32): past ``max_list_size`` it
still decodes the block to its end, so that its table stays in step with the peer's encoder,
but builds no list and refuses the block (``HeaderListTooLarge``, not fatal: only the stream
is refused); past four times that (one large table entry referenced over and over: an HPACK
bomb) it stops at once (fatal: the connection must end), so a block costs at most that
bound's worth of fields, whatever it holds. Huffman-coded strings are decoded by a table of
the code tree's states, four bits a step, and counted (``huffman_bytes``) so that the
connection can bound that work too. A header block whose bytes were seen before while the
table has not changed since is answered from a small cache: a client repeating the same call
sends the same few bytes of table references each time. Headers are encoded without the
dynamic table and without Huffman coding, which RFC 7541 allows a sender always: a gRPC
server's replies are a handful of short fields. A malformed block raises ``HpackError``. No
I/O; compiled with mypyc as part of the request path.
"""

from __future__ import annotations

from typing import Final

Headers = tuple[tuple[str, str], ...]


class HpackError(ValueError):
    """A header block that does not decode: the connection must end (COMPRESSION_ERROR)."""


class HeaderListTooLarge(Exception):
    """A header block whose decoded list passed the decoder's ``max_list_size`` (``limit``).

    Not fatal: the block was decoded to its end, the table is in step with the peer's, and
    only the stream it opens is refused; ``size`` is the list's whole size. Fatal: the list
    passed four times the limit, decoding stopped there with the table out of step, and the
    connection must end (ENHANCE_YOUR_CALM); ``size`` is what was measured when it stopped,
    at least that much."""

    def __init__(self, size: int, limit: int, fatal: bool = False) -> None:
        if fatal:
            super().__init__(f"header list of at least {size} octets, more than four times "
                             f"the limit of {limit}")
        else:
            super().__init__(f"header list of {size} octets, above the limit of {limit}")
        self.size = size
        self.limit = limit
        self.fatal = fatal


# RFC 7541 appendix A.
STATIC_TABLE: Final[tuple[tuple[str, str], ...]] = (
    (":authority", ""), (":method", "GET"), (":method", "POST"), (":path", "/"),
    (":path", "/index.html"), (":scheme", "http"), (":scheme", "https"), (":status", "200"),
    (":status", "204"), (":status", "206"), (":status", "304"), (":status", "400"),
    (":status", "404"), (":status", "500"), ("accept-charset", ""),
    ("accept-encoding", "gzip, deflate"), ("accept-language", ""), ("accept-ranges", ""),
    ("accept", ""), ("access-control-allow-origin", ""), ("age", ""), ("allow", ""),
    ("authorization", ""), ("cache-control", ""), ("content-disposition", ""),
    ("content-encoding", ""), ("content-language", ""), ("content-length", ""),
    ("content-location", ""), ("content-range", ""), ("content-type", ""), ("cookie", ""),
    ("date", ""), ("etag", ""), ("expect", ""), ("expires", ""), ("from", ""), ("host", ""),
    ("if-match", ""), ("if-modified-since", ""), ("if-none-match", ""), ("if-range", ""),
    ("if-unmodified-since", ""), ("last-modified", ""), ("link", ""), ("location", ""),
    ("max-forwards", ""), ("proxy-authenticate", ""), ("proxy-authorization", ""),
    ("range", ""), ("referer", ""), ("refresh", ""), ("retry-after", ""), ("server", ""),
    ("set-cookie", ""), ("strict-transport-security", ""), ("transfer-encoding", ""),
    ("user-agent", ""), ("vary", ""), ("via", ""), ("www-authenticate", ""),
)

# RFC 7541 appendix B: each symbol's code, right-aligned, and its length in bits; 256 is EOS.
_HUFFMAN_CODES: Final[tuple[tuple[int, int], ...]] = (
    (0x1ff8, 13), (0x7fffd8, 23), (0xfffffe2, 28), (0xfffffe3, 28), (0xfffffe4, 28),
    (0xfffffe5, 28), (0xfffffe6, 28), (0xfffffe7, 28), (0xfffffe8, 28), (0xffffea, 24),
    (0x3ffffffc, 30), (0xfffffe9, 28), (0xfffffea, 28), (0x3ffffffd, 30), (0xfffffeb, 28),
    (0xfffffec, 28), (0xfffffed, 28), (0xfffffee, 28), (0xfffffef, 28), (0xffffff0, 28),
    (0xffffff1, 28), (0xffffff2, 28), (0x3ffffffe, 30), (0xffffff3, 28), (0xffffff4, 28),
    (0xffffff5, 28), (0xffffff6, 28), (0xffffff7, 28), (0xffffff8, 28), (0xffffff9, 28),
    (0xffffffa, 28), (0xffffffb, 28), (0x14, 6), (0x3f8, 10), (0x3f9, 10),
    (0xffa, 12), (0x1ff9, 13), (0x15, 6), (0xf8, 8), (0x7fa, 11),
    (0x3fa, 10), (0x3fb, 10), (0xf9, 8), (0x7fb, 11), (0xfa, 8),
    (0x16, 6), (0x17, 6), (0x18, 6), (0x0, 5), (0x1, 5),
    (0x2, 5), (0x19, 6), (0x1a, 6), (0x1b, 6), (0x1c, 6),
    (0x1d, 6), (0x1e, 6), (0x1f, 6), (0x5c, 7), (0xfb, 8),
    (0x7ffc, 15), (0x20, 6), (0xffb, 12), (0x3fc, 10), (0x1ffa, 13),
    (0x21, 6), (0x5d, 7), (0x5e, 7), (0x5f, 7), (0x60, 7),
    (0x61, 7), (0x62, 7), (0x63, 7), (0x64, 7), (0x65, 7),
    (0x66, 7), (0x67, 7), (0x68, 7), (0x69, 7), (0x6a, 7),
    (0x6b, 7), (0x6c, 7), (0x6d, 7), (0x6e, 7), (0x6f, 7),
    (0x70, 7), (0x71, 7), (0x72, 7), (0xfc, 8), (0x73, 7),
    (0xfd, 8), (0x1ffb, 13), (0x7fff0, 19), (0x1ffc, 13), (0x3ffc, 14),
    (0x22, 6), (0x7ffd, 15), (0x3, 5), (0x23, 6), (0x4, 5),
    (0x24, 6), (0x5, 5), (0x25, 6), (0x26, 6), (0x27, 6),
    (0x6, 5), (0x74, 7), (0x75, 7), (0x28, 6), (0x29, 6),
    (0x2a, 6), (0x7, 5), (0x2b, 6), (0x76, 7), (0x2c, 6),
    (0x8, 5), (0x9, 5), (0x2d, 6), (0x77, 7), (0x78, 7),
    (0x79, 7), (0x7a, 7), (0x7b, 7), (0x7ffe, 15), (0x7fc, 11),
    (0x3ffd, 14), (0x1ffd, 13), (0xffffffc, 28), (0xfffe6, 20), (0x3fffd2, 22),
    (0xfffe7, 20), (0xfffe8, 20), (0x3fffd3, 22), (0x3fffd4, 22), (0x3fffd5, 22),
    (0x7fffd9, 23), (0x3fffd6, 22), (0x7fffda, 23), (0x7fffdb, 23), (0x7fffdc, 23),
    (0x7fffdd, 23), (0x7fffde, 23), (0xffffeb, 24), (0x7fffdf, 23), (0xffffec, 24),
    (0xffffed, 24), (0x3fffd7, 22), (0x7fffe0, 23), (0xffffee, 24), (0x7fffe1, 23),
    (0x7fffe2, 23), (0x7fffe3, 23), (0x7fffe4, 23), (0x1fffdc, 21), (0x3fffd8, 22),
    (0x7fffe5, 23), (0x3fffd9, 22), (0x7fffe6, 23), (0x7fffe7, 23), (0xffffef, 24),
    (0x3fffda, 22), (0x1fffdd, 21), (0xfffe9, 20), (0x3fffdb, 22), (0x3fffdc, 22),
    (0x7fffe8, 23), (0x7fffe9, 23), (0x1fffde, 21), (0x7fffea, 23), (0x3fffdd, 22),
    (0x3fffde, 22), (0xfffff0, 24), (0x1fffdf, 21), (0x3fffdf, 22), (0x7fffeb, 23),
    (0x7fffec, 23), (0x1fffe0, 21), (0x1fffe1, 21), (0x3fffe0, 22), (0x1fffe2, 21),
    (0x7fffed, 23), (0x3fffe1, 22), (0x7fffee, 23), (0x7fffef, 23), (0xfffea, 20),
    (0x3fffe2, 22), (0x3fffe3, 22), (0x3fffe4, 22), (0x7ffff0, 23), (0x3fffe5, 22),
    (0x3fffe6, 22), (0x7ffff1, 23), (0x3ffffe0, 26), (0x3ffffe1, 26), (0xfffeb, 20),
    (0x7fff1, 19), (0x3fffe7, 22), (0x7ffff2, 23), (0x3fffe8, 22), (0x1ffffec, 25),
    (0x3ffffe2, 26), (0x3ffffe3, 26), (0x3ffffe4, 26), (0x7ffffde, 27), (0x7ffffdf, 27),
    (0x3ffffe5, 26), (0xfffff1, 24), (0x1ffffed, 25), (0x7fff2, 19), (0x1fffe3, 21),
    (0x3ffffe6, 26), (0x7ffffe0, 27), (0x7ffffe1, 27), (0x3ffffe7, 26), (0x7ffffe2, 27),
    (0xfffff2, 24), (0x1fffe4, 21), (0x1fffe5, 21), (0x3ffffe8, 26), (0x3ffffe9, 26),
    (0xffffffd, 28), (0x7ffffe3, 27), (0x7ffffe4, 27), (0x7ffffe5, 27), (0xfffec, 20),
    (0xfffff3, 24), (0xfffed, 20), (0x1fffe6, 21), (0x3fffe9, 22), (0x1fffe7, 21),
    (0x1fffe8, 21), (0x7ffff3, 23), (0x3fffea, 22), (0x3fffeb, 22), (0x1ffffee, 25),
    (0x1ffffef, 25), (0xfffff4, 24), (0xfffff5, 24), (0x3ffffea, 26), (0x7ffff4, 23),
    (0x3ffffeb, 26), (0x7ffffe6, 27), (0x3ffffec, 26), (0x3ffffed, 26), (0x7ffffe7, 27),
    (0x7ffffe8, 27), (0x7ffffe9, 27), (0x7ffffea, 27), (0x7ffffeb, 27), (0xffffffe, 28),
    (0x7ffffec, 27), (0x7ffffed, 27), (0x7ffffee, 27), (0x7ffffef, 27), (0x7fffff0, 27),
    (0x3ffffee, 26), (0x3fffffff, 30),
)


def _huffman_tree() -> list[tuple[int, int]]:
    """The code tree's inner nodes, root first, each as its two children (bit 0, bit 1): an
    inner node's index, or ``~symbol`` for a leaf."""
    children: list[list[int]] = [[0, 0]]  # 0: no child yet (the root is no one's child)
    for symbol, (code, length) in enumerate(_HUFFMAN_CODES):  # EOS too: it has a leaf
        node = 0
        for shift in range(length - 1, 0, -1):
            bit = (code >> shift) & 1
            child = children[node][bit]
            if not child:
                child = len(children)
                children.append([0, 0])
                children[node][bit] = child
            node = child
        children[node][code & 1] = ~symbol
    return [(zero, one) for zero, one in children]


# The decoder's states are the tree's 256 inner nodes (the bits read since the last symbol)
# and one more, entered on EOS, that no input leaves. A step reads four bits: as no code is
# shorter than five, it emits at most one symbol. _HUFFMAN_STEPS[state * 16 + nibble] holds
# the next state's row (state * 16, so that the next index is one OR away) and, when a symbol
# was emitted, _EMITTED | symbol << 14.
_EOS: Final = 256
_EOS_STATE: Final = 256
_EMITTED: Final = 0x2000
_ROW: Final = 0x1FF0


def _huffman_steps(tree: list[tuple[int, int]]) -> list[int]:
    steps: list[int] = []
    for state in range(len(tree) + 1):
        for nibble in range(16):
            node = state
            emitted = 0
            for shift in (3, 2, 1, 0):
                if node == _EOS_STATE:
                    break
                child = tree[node][(nibble >> shift) & 1]
                if child >= 0:
                    node = child
                elif ~child == _EOS:
                    node = _EOS_STATE
                else:
                    emitted = _EMITTED | (~child) << 14
                    node = 0
            steps.append(node << 4 | emitted)
    return steps


def _huffman_ends(tree: list[tuple[int, int]]) -> list[str]:
    """Per state, why a string may not end there ("" where it may): section 5.2 allows only
    padding of up to seven bits, all ones (the most significant bits of EOS)."""
    ends = ["invalid Huffman padding: not the prefix of EOS"] * len(tree)
    ends.append("the EOS symbol in a Huffman-coded string")
    node = 0
    for depth in range(30):  # the all-ones path: EOS's prefixes
        ends[node] = "" if depth < 8 else "invalid Huffman padding: longer than 7 bits"
        node = tree[node][1]
    return ends


_HUFFMAN_TREE: Final = _huffman_tree()
_HUFFMAN_STEPS: Final = _huffman_steps(_HUFFMAN_TREE)
_HUFFMAN_ENDS: Final = _huffman_ends(_HUFFMAN_TREE)


def _huffman(data: bytes, start: int, end: int) -> bytes:
    """The Huffman-coded string ``data[start:end]``, decoded (section 5.2), without a copy
    of the block it is in."""
    steps = _HUFFMAN_STEPS
    out: list[int] = []
    step = 0
    # The EOS state is left to run to the end, unchecked: the loop stays two lookups a byte,
    # and the string's length already bounds the work.
    for i in range(start, end):
        byte = data[i]
        step = steps[(step & _ROW) | byte >> 4]
        if step >= _EMITTED:
            out.append(step >> 14)
        step = steps[(step & _ROW) | byte & 0x0F]
        if step >= _EMITTED:
            out.append(step >> 14)
    problem = _HUFFMAN_ENDS[(step & _ROW) >> 4]
    if problem:
        raise HpackError(problem)
    return bytes(out)


def huffman_decode(data: bytes) -> bytes:
    """RFC 7541 section 5.2's Huffman-coded string ``data``, decoded; the padding must be
    fewer than eight bits of EOS's prefix (all ones), and EOS itself may not appear."""
    return _huffman(data, 0, len(data))


def _read_int(block: bytes, pos: int, prefix: int) -> tuple[int, int]:
    """The integer of ``prefix`` bits starting at ``block[pos]`` (RFC 7541 section 5.1), and
    the position after it; more than five continuation octets (2**35) is an error."""
    limit = (1 << prefix) - 1
    value = block[pos] & limit
    pos += 1
    if value < limit:
        return value, pos
    shift = 0
    while True:
        if pos >= len(block) or shift > 28:
            raise HpackError("truncated or oversized integer")
        byte = block[pos]
        pos += 1
        value += (byte & 0x7F) << shift
        shift += 7
        if not byte & 0x80:
            return value, pos


_CACHED_BLOCK: Final = 1024  # the longest block the cache keeps
_FIELD_OVERHEAD: Final = 32  # RFC 7541 section 4.1 and RFC 9113 section 6.5.2


class HeaderDecoder:
    """One direction's HPACK state: the dynamic table the peer's encoder keeps in step, and
    the bounds on what one block may decode to.

    ``limit`` is SETTINGS_HEADER_TABLE_SIZE as this side announced it; ``max_list_size`` the
    largest header list a block may decode to (SETTINGS_MAX_HEADER_LIST_SIZE's measure).
    ``huffman_bytes`` counts the octets of Huffman-coded strings decoded so far."""

    def __init__(self, limit: int = 4096, max_list_size: int = 16384) -> None:
        self._entries: list[tuple[str, str]] = []  # oldest first
        self._size = 0
        self._limit = limit
        self._max = limit  # the size the peer last set, at most the limit
        self._max_list_size = max_list_size
        self._bomb = 4 * max_list_size
        self._cache: dict[bytes, Headers] = {}
        self._changed = False  # the last block changed the table
        self._list_size = 0  # of the block being decoded, so far
        self.huffman_bytes = 0

    @property
    def table(self) -> Headers:
        """The dynamic table, newest entry (index 62) first, as RFC 7541's examples show it."""
        return tuple(reversed(self._entries))

    @property
    def table_size(self) -> int:
        """The dynamic table's size by section 4.1's measure."""
        return self._size

    def decode(self, block: bytes) -> Headers:
        """The header list of ``block``. Raises ``HpackError`` for a block that does not
        decode, ``HeaderListTooLarge`` for one whose list passes ``max_list_size``."""
        if len(block) <= _CACHED_BLOCK:
            cached = self._cache.get(block)
            if cached is not None:
                return cached
        headers = self._decode(block)
        if self._changed:  # what was cached referred to the table as it was
            self._cache.clear()
        elif headers is not None and len(block) <= _CACHED_BLOCK:
            if len(self._cache) >= 64:
                self._cache.clear()
            self._cache[block] = headers
        if headers is None:
            raise HeaderListTooLarge(self._list_size, self._max_list_size)
        return headers

    def _decode(self, block: bytes) -> Headers | None:
        """The header list of ``block``, or None when it passed ``max_list_size``."""
        self._changed = False
        self._list_size = 0
        out: list[tuple[str, str]] | None = []
        updates = 0  # dynamic table size updates, allowed only before the first field
        fields = 0
        pos = 0
        end = len(block)
        while pos < end:
            byte = block[pos]
            if byte & 0x80:  # indexed field
                index, pos = _read_int(block, pos, 7)
                name, value = self._field(index)
            elif byte & 0x40:  # literal, added to the table
                name, value, pos = self._literal(block, pos, 6)
                self._add(name, value)
            elif byte & 0x20:  # dynamic table size update
                # Section 4.2: at the beginning of a block, and at most two (the smallest
                # size set since the last block, then the final one).
                if fields:
                    raise HpackError("dynamic table size update after a header field")
                if updates == 2:
                    raise HpackError("more than two dynamic table size updates")
                updates += 1
                size, pos = _read_int(block, pos, 5)
                if size > self._limit:
                    raise HpackError("table size update above the limit")
                self._max = size
                self._evict(0)
                self._changed = True
                continue
            else:  # literal without indexing, or never indexed
                name, value, pos = self._literal(block, pos, 4)
            fields += 1
            self._list_size += len(name) + len(value) + _FIELD_OVERHEAD
            if self._list_size > self._max_list_size:
                if self._list_size > self._bomb:
                    raise HeaderListTooLarge(self._list_size, self._max_list_size, fatal=True)
                out = None  # refused; what is left is decoded only for the table
            if out is not None:
                out.append((name, value))
        return None if out is None else tuple(out)

    def _literal(self, block: bytes, pos: int, prefix: int) -> tuple[str, str, int]:
        """A literal field whose name index has ``prefix`` bits (0: the name follows)."""
        index, pos = _read_int(block, pos, prefix)
        if index:
            name = self._field(index)[0]
        else:
            name, pos = self._string(block, pos)
        value, pos = self._string(block, pos)
        return name, value, pos

    def _string(self, block: bytes, pos: int) -> tuple[str, int]:
        if pos >= len(block):
            raise HpackError("truncated header block")
        huffman = bool(block[pos] & 0x80)
        length, pos = _read_int(block, pos, 7)
        end = pos + length
        if end > len(block):
            raise HpackError("truncated header block")
        # The fewest octets the string can decode to (a Huffman code is at most 30 bits):
        # a string that would carry the list past the bomb bound is not decoded at all.
        least = length * 8 // 30 if huffman else length
        if self._list_size + least > self._bomb:
            raise HeaderListTooLarge(self._list_size + least, self._max_list_size, fatal=True)
        if huffman:
            self.huffman_bytes += length
            return _huffman(block, pos, end).decode("latin-1"), end
        return block[pos:end].decode("latin-1"), end

    def _field(self, index: int) -> tuple[str, str]:
        if index <= 0:
            raise HpackError("header index 0")
        if index <= len(STATIC_TABLE):
            return STATIC_TABLE[index - 1]
        position = len(self._entries) - (index - len(STATIC_TABLE))
        if position < 0:
            raise HpackError(f"header index {index} is not in the table")
        return self._entries[position]

    def _add(self, name: str, value: str) -> None:
        size = len(name) + len(value) + _FIELD_OVERHEAD
        self._changed = True
        if size > self._max:
            self._entries.clear()
            self._size = 0
            return
        self._evict(size)
        self._entries.append((name, value))
        self._size += size

    def _evict(self, room: int) -> None:
        while self._entries and self._size + room > self._max:
            name, value = self._entries.pop(0)
            self._size -= len(name) + len(value) + _FIELD_OVERHEAD


def _encode_int(value: int, prefix: int, flags: int) -> bytes:
    limit = (1 << prefix) - 1
    if value < limit:
        return bytes([flags | value])
    out = bytearray([flags | limit])
    value -= limit
    while value >= 0x80:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


_STATIC_FIELDS: Final = {field: i + 1 for i, field in enumerate(STATIC_TABLE) if field[1]}
_STATIC_NAMES: Final = {name: i + 1 for i, (name, _) in reversed(list(enumerate(STATIC_TABLE)))}


def encode_headers(fields: list[tuple[str, str]]) -> bytes:
    """A header block of ``fields``: a static table entry where one matches whole, else a
    literal that the peer does not add to its table, names and values as they are (octets:
    Latin-1)."""
    out = bytearray()
    for name, value in fields:
        index = _STATIC_FIELDS.get((name, value), 0)
        if index:
            out += _encode_int(index, 7, 0x80)
            continue
        index = _STATIC_NAMES.get(name, 0)
        out += _encode_int(index, 4, 0x00)
        if not index:
            raw_name = name.encode("latin-1")
            out += _encode_int(len(raw_name), 7, 0x00)
            out += raw_name
        raw = value.encode("latin-1")
        out += _encode_int(len(raw), 7, 0x00)
        out += raw
    return bytes(out)
