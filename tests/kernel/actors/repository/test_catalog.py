"""catalog.toml: the format, its errors (with file:line:col where there is one), the filter."""

from __future__ import annotations

from pathlib import Path

import pytest

from inferd.kernel.actors.repository.catalog import (
    CatalogFilter,
    ModelCatalog,
    parse_catalog,
    read_catalog,
)
from inferd.protocols.errors import InvalidArgument

GOOD = """\
description = "Reads text in images"
task = "ocr"
owner = "document-ai"

[labels]
stage = "prod"
team = "docs"

[links]
runbook = "https://example.com/ocr"
"""


def test_a_full_file_parses_in_order() -> None:
    catalog = parse_catalog(GOOD, "ocr/catalog.toml")
    assert catalog == ModelCatalog(
        "Reads text in images", "ocr", "document-ai",
        (("stage", "prod"), ("team", "docs")), (("runbook", "https://example.com/ocr"),))
    assert catalog.to_json() == {
        "description": "Reads text in images", "task": "ocr", "owner": "document-ai",
        "labels": {"stage": "prod", "team": "docs"},
        "links": {"runbook": "https://example.com/ocr"},
    }


def test_every_key_is_optional() -> None:
    assert parse_catalog("", "m/catalog.toml") == ModelCatalog()
    assert ModelCatalog().to_json() == {"description": "", "task": "", "owner": "",
                                        "labels": {}, "links": {}}


@pytest.mark.parametrize(("text", "message"), [
    ('task = "ocr"\ndescripton = "x"\n',
     'm/catalog.toml:2:1: unknown key "descripton" (known keys: description, task, owner, '
     'labels, links)'),
    ('description = "x"\ntask = 3\n', 'm/catalog.toml:2:1: "task" must be a string, not an '
     "integer"),
    ('owner = true\n', 'm/catalog.toml:1:1: "owner" must be a string, not a boolean'),
    ('labels = "prod"\n', 'm/catalog.toml:1:1: "labels" must be a table of strings '
     '(key = "value"), not a string'),
    ('task = "ocr"\n\n[labels]\nstage = "prod"\nreplicas = 3\n',
     "m/catalog.toml:5:1: labels.replicas must be a string, not an integer"),
    ('labels.stage = ["a"]\n', "m/catalog.toml:1:1: labels.stage must be a string, not an "
     "array"),
    ('[links]\ndocs = 1.5\n', "m/catalog.toml:2:1: links.docs must be a string, not a float"),
    ('[labels]\n"-bad" = "x"\n', 'm/catalog.toml:2:1: label key "-bad" must be 1-63 letters, '
     'digits or "._/-", starting with a letter or digit'),
    ('task = "ocr\n', "m/catalog.toml:1:12: Illegal character '\\n'"),
    ('[tags]\nx = "y"\n', 'm/catalog.toml:1:1: unknown key "tags" (known keys: description, '
     "task, owner, labels, links)"),
])
def test_bad_files_say_where_and_what(text: str, message: str) -> None:
    with pytest.raises(InvalidArgument) as caught:
        parse_catalog(text, "m/catalog.toml")
    assert caught.value.message == message


def test_read_catalog_is_none_without_a_file_and_refuses_bad_bytes(tmp_path: Path) -> None:
    assert read_catalog(tmp_path, "m/catalog.toml") is None
    (tmp_path / "catalog.toml").write_bytes(b'task = "\xff"\n')
    with pytest.raises(InvalidArgument, match=r"^m/catalog.toml: the file is not UTF-8 text$"):
        read_catalog(tmp_path, "m/catalog.toml")
    (tmp_path / "catalog.toml").write_text('task = "ocr"\n', encoding="utf-8")
    assert read_catalog(tmp_path, "m/catalog.toml") == ModelCatalog(task="ocr")


def test_the_filter_needs_every_label_and_the_task() -> None:
    catalog = parse_catalog(GOOD, "m/catalog.toml")
    assert CatalogFilter().keeps(None) and CatalogFilter().keeps(catalog)
    assert CatalogFilter(task="ocr").keeps(catalog)
    assert not CatalogFilter(task="asr").keeps(catalog)
    assert CatalogFilter((("stage", "prod"), ("team", "docs"))).keeps(catalog)
    assert not CatalogFilter((("stage", "prod"), ("team", "other"))).keeps(catalog)
    assert not CatalogFilter((("missing", ""),)).keeps(catalog)
    assert not CatalogFilter(task="ocr").keeps(None)
