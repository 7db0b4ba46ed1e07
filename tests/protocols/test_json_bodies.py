"""Tests of inferd.protocols.json_bodies' bound on JSON nesting: ``nested_deeper_than`` against
the depth of the parsed document, whatever the strings, escapes or text encoding, and
``parse_json`` refusing a document too deep for the parser without recursing into it. No
sockets."""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from inferd.protocols import json_bodies
from inferd.protocols.errors import InvalidArgument

CAP = json_bodies.MAX_JSON_DEPTH
# Text that looks like structure: brackets, quotes and backslashes inside strings and keys.
tricky_text = st.text(alphabet='[]{}"\\ a\u00e9\u5b22\U0001f600', max_size=8)
documents = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | tricky_text,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(tricky_text, inner, max_size=4),
    max_leaves=40,
)


def depth(document: Any) -> int:
    if isinstance(document, list):
        return 1 + max(map(depth, document), default=0)
    if isinstance(document, dict):
        return 1 + max(map(depth, document.values()), default=0)
    return 0


def nested(levels: int, leaf: Any = 1) -> Any:
    document = leaf
    for _ in range(levels):
        document = [document]
    return document


@settings(max_examples=400, deadline=None)
@given(documents, st.sampled_from(["utf-8", "utf-16", "utf-16-le", "utf-32-be"]),
       st.booleans())
def test_the_scan_agrees_with_the_parsed_depth(document: Any, encoding: str,
                                                ascii_only: bool) -> None:
    text = json.dumps(document, ensure_ascii=ascii_only).encode(encoding)
    levels = depth(document)
    for limit in range(0, levels + 2):
        assert json_bodies.nested_deeper_than(text, limit) == (levels > limit), limit


def test_brackets_in_strings_and_escapes_are_text() -> None:
    inside = json.dumps({"a": "[" * 200 + '\\"[' + "{" * 100, "b\\": ["\\\\", "]" * 50]})
    assert json.loads(inside)  # valid, two levels deep
    assert not json_bodies.nested_deeper_than(inside.encode(), 2)
    assert json_bodies.nested_deeper_than(inside.encode(), 1)


def test_a_document_at_the_cap_parses_and_one_level_more_is_refused() -> None:
    # Enough brackets elsewhere that counting them cannot settle it.
    wide = [[0]] * 100
    at_cap = {"wide": wide, "deep": nested(CAP - 1)}
    assert json_bodies.parse_json(json.dumps(at_cap).encode(), "request") == at_cap
    too_deep = {"wide": wide, "deep": nested(CAP)}
    body = memoryview(json.dumps(too_deep).encode())
    with pytest.raises(InvalidArgument) as error:
        json_bodies.parse_json(body, "repository index request")
    assert error.value.message == (
        "malformed repository index request: JSON nesting deeper than 64 levels")


@pytest.mark.parametrize("text", [
    b"[" * 1_000_000,  # never closed
    b"[" * 100_000 + b"]" * 100_000,
    b'{"a":' * 100_000 + b"1" + b"}" * 100_000,
    ("[" * 100_000).encode("utf-16"),
    b'["' + b"]" * 10 + b'", ' + b"[" * 5000,  # a string of closers does not close
], ids=["unclosed", "arrays", "objects", "utf-16", "closers-in-a-string"])
def test_deep_nesting_is_refused_before_parsing(text: bytes,
                                               monkeypatch: pytest.MonkeyPatch) -> None:
    def recursing_parser(*args: Any, **kwargs: Any) -> Any:
        raise AssertionError("the parser was called")

    monkeypatch.setattr(json_bodies.json, "loads", recursing_parser)
    with pytest.raises(InvalidArgument) as error:
        json_bodies.parse_json(text, "inference request")
    assert error.value.message == (
        "malformed inference request: JSON nesting deeper than 64 levels")


def test_other_mistakes_keep_their_messages() -> None:
    with pytest.raises(InvalidArgument, match="invalid JSON"):
        json_bodies.parse_json(b"[" * 10, "inference request")
    with pytest.raises(InvalidArgument, match="not UTF-8 text"):
        json_bodies.parse_json(b'["\xff"]', "inference request")
    assert json_bodies.parse_json(b"", "inference request") is None


def test_check_nesting_opens_with_the_callers_words() -> None:
    with pytest.raises(InvalidArgument) as error:
        json_bodies.check_nesting(b"[" * 70, "failed to parse the trace setting request")
    assert error.value.message == (
        "failed to parse the trace setting request: JSON nesting deeper than 64 levels")
    json_bodies.check_nesting(json.dumps(nested(CAP)).encode(), "unused")
