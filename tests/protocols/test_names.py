"""The model-name rule: what is refused, why, and how a refused name is shown."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from inferd.protocols.errors import InvalidArgument
from inferd.protocols.names import (
    MAX_NAME_BYTES,
    check_load_name,
    check_model_name,
    model_name_problem,
    quoted,
)


@pytest.mark.parametrize(
    ("name", "problem"),
    [
        ("", "empty"),
        (".", "starts with '.'"),
        ("..", "starts with '.'"),
        (".hidden", "starts with '.'"),
        ("a/b", "path separator"),
        ("a\\b", "path separator"),
        ("a\x00b", "non-printable"),
        ("a\r\nb", "non-printable"),
        ("a\u2028b", "non-printable"),  # a line separator forges log lines too
        ("é" * 128, "longer than 255 bytes"),  # 128 characters, 256 bytes
    ],
)
def test_refused_names_say_why(name: str, problem: str) -> None:
    assert problem in model_name_problem(name)
    with pytest.raises(InvalidArgument) as error:
        check_model_name(name)
    assert "is not a valid model name" in error.value.message
    assert "\n" not in error.value.message and "\r" not in error.value.message


@pytest.mark.parametrize("name", ["simple", "a..b", "with space", "résumé", "x" * MAX_NAME_BYTES,
                                  "v1.2-final_ok"])
def test_ordinary_names_pass(name: str) -> None:
    assert check_model_name(name) == name


def test_quoted_names_are_escaped_and_cut_short() -> None:
    assert quoted("simple") == "'simple'"
    assert quoted("a\r\nb") == "'a\\r\\nb'"
    assert len(quoted("m" * 1000)) < 80


@given(st.text())
def test_a_name_either_passes_or_is_refused_with_a_printable_message(name: str) -> None:
    problem = model_name_problem(name)
    if not problem:
        assert check_model_name(name) == name
        return
    with pytest.raises(InvalidArgument) as error:
        check_model_name(name)
    assert error.value.message.isprintable()


EMPTY = "Model name cannot be empty. Please enter a valid name to deploy."


@pytest.mark.parametrize(("name", "message"), [
    ("", EMPTY),
    (" \t\n\v\f\r", EMPTY),
    ("..", "invalid model name '..', model name must not contain path traversal characters"),
    (" ..\t", "invalid model name ' ..\\t', model name must not contain path traversal "
              "characters"),  # shown escaped: no control character in a message
    ("a/b", "invalid model name 'a/b', model name must not contain path traversal characters"),
    (".hidden", "'.hidden' is not a valid model name: it starts with '.'"),  # inferd's rule
])
def test_a_load_hears_tritons_words_first(name: str, message: str) -> None:
    with pytest.raises(InvalidArgument) as error:
        check_load_name(name)
    assert error.value.message == message


@pytest.mark.parametrize("name", ["simple", "model..1", "a..b", " spaced "])
def test_names_triton_loads_pass_the_load_check(name: str) -> None:
    assert check_load_name(name) == name
