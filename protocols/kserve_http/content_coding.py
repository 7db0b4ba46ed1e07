"""HTTP content codings of KServe bodies: gzip and deflate, both ways, with a size limit.

Owns the choice of a response coding from ``Accept-Encoding`` (q-values honoured, identity
when nothing better is offered), compression of a response, and streaming decompression of a
request body that refuses to produce more than a limit, so a small compressed body can never
expand into a huge one in memory. "deflate" is the zlib format (what clients send), with raw
deflate accepted too. Pure: bytes in, bytes out, no I/O.
"""

from __future__ import annotations

import zlib
from collections.abc import Iterable

from inferd.protocols.errors import InvalidArgument

IDENTITY = "identity"
GZIP = "gzip"
DEFLATE = "deflate"
SUPPORTED = (IDENTITY, GZIP, DEFLATE)

_ALIASES = {"x-gzip": GZIP, "": IDENTITY}
_GZIP_WBITS = zlib.MAX_WBITS | 16
_ZLIB_WBITS = zlib.MAX_WBITS
_RAW_WBITS = -zlib.MAX_WBITS
# Fast compression: responses are latency-bound, and tensors compress poorly anyway.
COMPRESSION_LEVEL = 1


def choose_response_coding(accept_encoding: str | None) -> str:
    """The coding to answer with: the highest-weighted of gzip/deflate/identity offered,
    identity when the header is absent or offers nothing inferd supports."""
    if not accept_encoding:
        return IDENTITY
    best, best_weight = IDENTITY, 0.0
    for offer in accept_encoding.split(","):
        name, _, parameters = offer.partition(";")
        name = _ALIASES.get(name.strip().lower(), name.strip().lower())
        if name not in SUPPORTED:
            continue
        weight = 1.0
        parameter = parameters.strip().lower()
        if parameter.startswith("q="):
            try:
                weight = float(parameter[2:])
            except ValueError:
                continue
        if weight > best_weight:
            best, best_weight = name, weight
    return best


def compress(parts: Iterable[bytes | memoryview], coding: str) -> bytes:
    """``parts`` joined and compressed with ``coding`` (gzip or deflate)."""
    wbits = _GZIP_WBITS if coding == GZIP else _ZLIB_WBITS
    compressor = zlib.compressobj(COMPRESSION_LEVEL, zlib.DEFLATED, wbits)
    chunks = [compressor.compress(part) for part in parts]
    chunks.append(compressor.flush())
    return b"".join(chunks)


class BodyDecoder:
    """Decodes a request body chunk by chunk as its ``Content-Encoding`` says, raising
    ``InvalidArgument`` as soon as the decoded size would pass ``limit``."""

    def __init__(self, content_encoding: str | None, limit: int) -> None:
        coding = (content_encoding or "").strip().lower()
        coding = _ALIASES.get(coding, coding)
        if coding not in SUPPORTED:
            raise InvalidArgument(
                f"unsupported Content-Encoding '{content_encoding}' (use gzip, deflate or identity)"
            )
        self.coding = coding
        self._limit = limit
        self._produced = 0
        self._decompressor: zlib._Decompress | None = None
        self._pending = b""

    def feed(self, chunk: bytes | memoryview) -> bytes | memoryview:
        """The decoded bytes ``chunk`` yields (maybe none yet)."""
        if self.coding == IDENTITY:
            self._count(len(chunk))
            return chunk
        output = []
        data = bytes(chunk)
        if self._decompressor is None:
            # The zlib-or-raw choice needs the first two bytes of the stream.
            data, self._pending = self._pending + data, b""
            if self.coding == DEFLATE and len(data) < 2:
                self._pending = data
                return b""
        while data:
            if self._decompressor is None:
                self._decompressor = zlib.decompressobj(self._wbits(data))
            decompressor = self._decompressor
            if decompressor.eof:
                data = self._after_end(data)
                continue
            try:
                produced = decompressor.decompress(data, self._limit - self._produced + 1)
            except zlib.error as error:
                raise InvalidArgument(
                    f"the request body is not valid {self.coding} data: {error}"
                ) from None
            self._count(len(produced))
            output.append(produced)
            if decompressor.unconsumed_tail:
                data = decompressor.unconsumed_tail
            else:
                data = decompressor.unused_data if decompressor.eof else b""
        return b"".join(output)

    def finish(self) -> bytes:
        """Whatever is left; refuses a compressed body that ended early."""
        if self.coding == IDENTITY:
            return b""
        if self._decompressor is None:
            raise InvalidArgument(f"the request body is too short to be {self.coding} data")
        if not self._decompressor.eof:
            raise InvalidArgument(f"the {self.coding} request body is truncated")
        rest = self._decompressor.flush()
        self._count(len(rest))
        return rest

    def _wbits(self, data: bytes) -> int:
        if self.coding == GZIP:
            return _GZIP_WBITS
        # A zlib stream starts with a header whose 16-bit value is a multiple of 31.
        if len(data) >= 2 and data[0] & 0x0F == 8 and (data[0] << 8 | data[1]) % 31 == 0:
            return _ZLIB_WBITS
        return _RAW_WBITS

    def _after_end(self, data: bytes) -> bytes:
        """Data after the end of a stream: another gzip member starts; anything else is wrong."""
        if self.coding == GZIP and data[:2] == b"\x1f\x8b":
            self._decompressor = zlib.decompressobj(_GZIP_WBITS)
            return data
        if self.coding == GZIP and not data.strip(b"\x00"):
            return b""  # zero padding after the last member, as gzip(1) tolerates
        raise InvalidArgument(
            f"the request body has data after the end of its {self.coding} stream"
        )

    def _count(self, size: int) -> None:
        self._produced += size
        if self._produced > self._limit:
            raise InvalidArgument(
                f"the request body decompresses to more than the maximum input size of "
                f"{self._limit} bytes"
                if self.coding != IDENTITY
                else "the request body is larger than the maximum input size of "
                f"{self._limit} bytes"
            )
