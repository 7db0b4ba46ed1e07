"""The one table renderer: columns padded to their widest cell, numbers right-aligned, an
optional rule under the header, no trailing blanks."""

from __future__ import annotations

from inferd.kernel.sdk.table import format_table


def test_columns_are_padded_and_numbers_right_aligned() -> None:
    text = format_table(("MODEL", "COUNT", "STATE"), [("simple", 7, "READY"), ("m", 1234, "")],
                        right={1})
    assert text.splitlines() == [
        "MODEL   COUNT  STATE",
        "simple      7  READY",
        "m        1234",
    ]


def test_a_rule_stands_under_the_header() -> None:
    text = format_table(("A", "LONGER"), [("xyz", "1")], rule=True)
    assert text.splitlines() == ["A    LONGER", "───  ──────", "xyz  1"]


def test_a_table_without_rows_is_its_header() -> None:
    assert format_table(("MODEL", "STATE"), []) == "MODEL  STATE"
