"""RFC 7541's Huffman code (section 5.2, appendix B) for ``inferd.protocols.http2.hpack``: the
decoder of a Huffman-coded string, written for a hostile peer. It walks a table of the code
tree's states four bits a step (no code is shorter than five bits, so a step emits at most
one symbol), built once at import from appendix B's codes: a few dozen MB/s compiled, at any
mix of code lengths. Padding longer than seven bits, padding that is not EOS's prefix and the
EOS symbol itself raise ``HuffmanError``. No I/O; compiled with mypyc as part of the request
path.
"""

from __future__ import annotations

from typing import Final


class HuffmanError(ValueError):
    """A Huffman-coded string that does not decode."""


# RFC 7541 appendix B: each symbol's code, right-aligned, and its length in bits; 256 is EOS.
CODES: Final[tuple[tuple[int, int], ...]] = (
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
    for symbol, (code, length) in enumerate(CODES):  # EOS too: it has a leaf
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


def decode_slice(data: bytes, start: int, end: int) -> bytes:
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
        raise HuffmanError(problem)
    return bytes(out)


def decode(data: bytes) -> bytes:
    """RFC 7541 section 5.2's Huffman-coded string ``data``, decoded; the padding must be
    fewer than eight bits of EOS's prefix (all ones), and EOS itself may not appear."""
    return decode_slice(data, 0, len(data))
