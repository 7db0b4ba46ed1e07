"""version_labels.toml (inferd.kernel.modelconfig.version_labels): what it may say, the
place of each error (what ``inferd check`` points at), and which versions a load selects."""

from __future__ import annotations

import pytest

from inferd.kernel.modelconfig.version_labels import (
    VersionLabels,
    parse_labels,
    selected_versions,
)
from inferd.protocols.errors import InvalidArgument

NAME = "m/version_labels.toml"


def refused(text: str, available: tuple[int, ...] | None = (1, 2, 3)) -> str:
    with pytest.raises(InvalidArgument) as error:
        parse_labels(text, NAME, available)
    return error.value.message


def test_labels_and_the_canary_share_are_read() -> None:
    labels = parse_labels("canary_percent = 12.5\n[labels]\nstable = 1\ncanary = 3\n", NAME,
                          (1, 2, 3))
    assert labels == VersionLabels({"canary": 3, "stable": 1}, 12.5)
    assert labels.targets() == (1, 3)
    assert parse_labels("", NAME) == VersionLabels()


@pytest.mark.parametrize(("text", "expected"), [
    ("[labels]\nstable = 1\ncanary = 7\n",
     f"{NAME}:3:1: label 'canary' names version 7, which has no version folder "
     "(version folders: 1, 2, 3)"),
    ("\ncanary_percent = 101\n", f"{NAME}:2:1: 'canary_percent' must be a number from 0 "
                                 "to 100, not 101"),
    ("canary_percent = true\n", f"{NAME}:1:1: 'canary_percent' must be a number"),
    ("[labels]\nstable = \"2\"\n", f"{NAME}:2:1: label 'stable' must name a version number"),
    ("[labels]\nstable = 0\n", f"{NAME}:2:1: label 'stable' must name a version number"),
    ("[labels]\nBad = 1\n", f"{NAME}:2:1: label name 'Bad' must be 1-32 lowercase"),
    ("stable = 1\n", f'{NAME}:1:1: unknown key "stable" (known keys: canary_percent, labels)'),
    ("labels = 3\n", f'{NAME}:1:1: "labels" must be a table of versions'),
    ("[labels\n", f"{NAME}:1:"),
])
def test_each_problem_is_refused_at_its_line(text: str, expected: str) -> None:
    assert refused(text).startswith(expected)


def test_versions_selected_by_a_load() -> None:
    assert selected_versions("m", [3], [1, 2, 3], [1], exact=False) == [1, 3]
    assert selected_versions("m", [3], [1, 2, 3], [1, 2], exact=True) == [1, 2]
    with pytest.raises(InvalidArgument) as error:
        selected_versions("m", [3], [1, 3], [2, 4], exact=True)
    assert error.value.message == ("model 'm' has no version folder for version 2, 4 "
                                   "(version folders: 1, 3)")
