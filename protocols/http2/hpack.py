"""HPACK (RFC 7541) for the loop gRPC server's HTTP/2 (``inferd.protocols.http2.connection``): the
decoder of one connection's header blocks, with the peer's dynamic table and Huffman-coded
strings, and an encoder that uses neither.

The decoder is written for a hostile peer. It measures each decoded header list as RFC 9113
section 6.5.2 does (per field, name and value octets plus 32): past ``max_list_size`` it
still decodes the block to its end, so that its table stays in step with the peer's encoder,
but builds no list and refuses the block (``HeaderListTooLarge``, not fatal: only the stream
is refused); past four times that (one large table entry referenced over and over: an HPACK
bomb) it stops at once (fatal: the connection must end), so a block costs at most that
bound's worth of fields, whatever it holds. Huffman-coded strings are decoded by
``inferd.protocols.http2.huffman`` and counted (``huffman_bytes``) so that the connection can bound
that work too. A header block whose bytes were seen before while the
table has not changed since is answered from a small cache: a client repeating the same call
sends the same few bytes of table references each time. Headers are encoded without the
dynamic table and without Huffman coding, which RFC 7541 allows a sender always: a gRPC
server's replies are a handful of short fields. A malformed block raises ``HpackError``. No
I/O; compiled with mypyc as part of the request path.
"""

from __future__ import annotations

from typing import Final

from inferd.protocols.http2.huffman import HuffmanError, decode_slice

Headers = tuple[tuple[str, str], ...]


def huffman_decode(data: bytes) -> bytes:
    """A Huffman-coded string ``data``, decoded (``inferd.protocols.http2.huffman``)."""
    try:
        return decode_slice(data, 0, len(data))
    except HuffmanError as error:
        raise HpackError(str(error)) from None


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
            try:
                return decode_slice(block, pos, end).decode("latin-1"), end
            except HuffmanError as error:
                raise HpackError(str(error)) from None
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


def encode_int(value: int, prefix: int, flags: int) -> bytes:
    """RFC 7541 section 5.1: ``value`` in a ``prefix``-bit prefix, the first octet's other
    bits ``flags``."""
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
            out += encode_int(index, 7, 0x80)
            continue
        index = _STATIC_NAMES.get(name, 0)
        out += encode_int(index, 4, 0x00)
        if not index:
            raw_name = name.encode("latin-1")
            out += encode_int(len(raw_name), 7, 0x00)
            out += raw_name
        raw = value.encode("latin-1")
        out += encode_int(len(raw), 7, 0x00)
        out += raw
    return bytes(out)
