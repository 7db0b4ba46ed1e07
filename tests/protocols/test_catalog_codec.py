"""The catalog's HTTP forms (pure): the query string of ``GET v2/catalog`` and the JSON body,
and the index row's ``catalog`` field; plus the new kinds on the kernel wire."""

from __future__ import annotations

import json

import pytest

from inferd.protocols.kserve_http import admin
from inferd.protocols.wire import codec as wire
from inferd.protocols.errors import InvalidArgument
from inferd.protocols.messages import (
    Catalog,
    CatalogEntry,
    CatalogRequest,
    Envelope,
    Index,
    IndexEntry,
    TensorSpec,
)

ENTRY = CatalogEntry(
    "ocr", "ensemble", "", ("1", "2"), ("2",), (TensorSpec("INPUT", "BYTES", (-1, 1)),),
    (TensorSpec("OUTPUT", "BYTES", (-1, 2)),), "READY", "", "",
    {"task": "ocr", "labels": {"stage": "prod"}})


@pytest.mark.parametrize(("query", "request_"), [
    ("", CatalogRequest()),
    ("task=ocr", CatalogRequest((), "ocr")),
    ("label=stage=prod&label=team=a%3Db", CatalogRequest((("stage", "prod"), ("team", "a=b")))),
    ("label=stage%3Dprod&task=ocr", CatalogRequest((("stage", "prod"),), "ocr")),
    ("label=empty=", CatalogRequest((("empty", ""),))),
    ("label=caf%C3%A9=%C3%A9t%C3%A9", CatalogRequest((("café", "été"),))),
])
def test_filters_decode(query: str, request_: CatalogRequest) -> None:
    assert admin.decode_catalog_request(query) == request_


@pytest.mark.parametrize(("query", "message"), [
    ("label=nokey", "catalog filter label='nokey': expected label=KEY=VALUE"),
    ("task=a&task=b", "catalog filter: 'task' is given more than once"),
    ("colour=red", "catalog filter: unknown parameter 'colour' (expected 'label' or 'task')"),
    ("task", "catalog filter: malformed query string: bad query field: 'task'"),
    ("label=%FF=x", "catalog filter: malformed query string: 'utf-8' codec can't decode byte "
                    "0xff in position 0: invalid start byte"),
])
def test_bad_filters_are_refused(query: str, message: str) -> None:
    with pytest.raises(InvalidArgument) as caught:
        admin.decode_catalog_request(query)
    assert caught.value.message == message


def test_catalog_and_index_encode() -> None:
    assert json.loads(admin.encode_catalog(Catalog((ENTRY,)))) == {"models": [{
        "name": "ocr", "platform": "ensemble", "backend": "", "versions": ["1", "2"],
        "loadable_versions": ["2"], "state": "READY", "reason": "",
        "inputs": [{"name": "INPUT", "datatype": "BYTES", "shape": [-1, 1]}],
        "outputs": [{"name": "OUTPUT", "datatype": "BYTES", "shape": [-1, 2]}],
        "metadata": {"task": "ocr", "labels": {"stage": "prod"}}, "error": ""}]}
    index = Index((IndexEntry("plain"), IndexEntry("ocr", "1", "READY", catalog={"task": "ocr"})))
    assert json.loads(admin.encode_index(index)) == [
        {"name": "plain"}, {"name": "ocr", "version": "1", "state": "READY",
                            "catalog": {"task": "ocr"}}]


@pytest.mark.parametrize("message", [
    CatalogRequest((("stage", "prod"),), "ocr"), Catalog((ENTRY, CatalogEntry("bare"))),
    Index((IndexEntry("ocr", "1", "READY", catalog={"labels": {"a": "b"}}),)),
])
def test_the_new_kinds_cross_the_wire(message: object) -> None:
    envelope = Envelope(7, "client", "control", message)  # type: ignore[arg-type]
    assert wire.decode(wire.encode(envelope)) == envelope
