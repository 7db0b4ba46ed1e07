"""The model catalog against a real server: the ``catalog`` field of the repository index (read
by tritonclient http, and tritonclient grpc still parsing its index), ``GET v2/catalog`` with
its filters and errors, in the ``model-repository`` restricted-API group, and the native zmq
client's ``catalog`` (sync and async). A model never loaded is listed with its inputs and
outputs, an ONNX model without them in its config with those its file declares."""

from __future__ import annotations

import asyncio
import http.client
import json
import shutil
from pathlib import Path
from typing import Any

import pytest
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient

from inferd.protocols.client import AsyncClient
from inferd.protocols.messages import CatalogEntry, TensorSpec
from tests.e2e.inferd_harness import EXAMPLE_REPOSITORY, InferdHarness, ServerHandle


HEADER = {"catalog-key": "let-me-in"}
BARE_CATALOG = """\
description = "simple's model file with a config that names no tensors"
task = "arithmetic"
owner = "tests"

[labels]
stage = "dev"
team = "platform"
"""
SIMPLE_INPUTS = tuple(TensorSpec(f"INPUT{i}", "INT32", (-1, 16)) for i in (0, 1))
SIMPLE_OUTPUTS = tuple(TensorSpec(f"OUTPUT{i}", "INT32", (-1, 16)) for i in (0, 1))


@pytest.fixture(scope="module")
def repository(module_inferd: InferdHarness) -> Path:
    root = module_inferd.repository("simple", "craft")
    bare = root / "bare"
    (bare / "1").mkdir(parents=True)
    shutil.copy(EXAMPLE_REPOSITORY / "simple" / "1" / "model.onnx", bare / "1" / "model.onnx")
    (bare / "config.pbtxt").write_text('platform: "onnxruntime_onnx"\n', encoding="utf-8")
    (bare / "catalog.toml").write_text(BARE_CATALOG, encoding="utf-8")
    broken = root / "broken_catalog"
    shutil.copytree(root / "simple", broken)
    (broken / "config.pbtxt").write_text(
        (root / "simple" / "config.pbtxt").read_text().replace('"simple"', '"broken_catalog"'))
    (broken / "catalog.toml").write_text('task = 3\n', encoding="utf-8")
    return root


@pytest.fixture(scope="module")
def server(module_inferd: InferdHarness, repository: Path) -> ServerHandle:
    return module_inferd.start(
        repository, "--model-control-mode=explicit", "--load-model=simple",
        "--http-restricted-api=model-repository:catalog-key=let-me-in")


def get(server: ServerHandle, path: str, headers: dict[str, str] | None = None
        ) -> tuple[int, Any]:
    host, port = server.http_url.split(":")
    connection = http.client.HTTPConnection(host, int(port), timeout=60)
    try:
        connection.request("GET", path, headers=headers if headers is not None else HEADER)
        response = connection.getresponse()
        return response.status, json.loads(response.read() or b"null")
    finally:
        connection.close()


def names(document: dict[str, Any]) -> list[str]:
    return [model["name"] for model in document["models"]]


def test_tritonclient_http_reads_the_index_with_its_catalog_field(server: ServerHandle,
                                                                  repository: Path) -> None:
    client = httpclient.InferenceServerClient(server.http_url)
    index = client.get_model_repository_index(headers=HEADER)
    rows = {row["name"]: row for row in index}
    # No catalog.toml: Triton's row, untouched.
    assert rows["simple"] == {"name": "simple", "version": "1", "state": "READY"}
    assert rows["bare"] == {"name": "bare", "catalog": {
        "description": "simple's model file with a config that names no tensors",
        "task": "arithmetic", "owner": "tests", "labels": {"stage": "dev", "team": "platform"},
        "links": {}}}
    # The example's metadata travels with the model folder.
    assert rows["craft"]["catalog"]["labels"]["pipeline"] == "ocr"
    assert rows["broken_catalog"] == {"name": "broken_catalog"}  # the catalog says why
    assert client.get_model_repository_index(headers=HEADER) == index
    client.close()


def test_tritonclient_grpc_still_parses_its_index(server: ServerHandle) -> None:
    client = grpcclient.InferenceServerClient(server.grpc_url)
    index = client.get_model_repository_index(as_json=True)["models"]
    assert {"name": "simple", "version": "1", "state": "READY"} in index
    assert {"name": "bare"} in index
    client.close()


def test_the_catalog_lists_every_model_loaded_or_not(server: ServerHandle) -> None:
    status, document = get(server, "/v2/catalog")
    assert status == 200
    assert names(document) == ["bare", "broken_catalog", "craft", "simple"]
    models = {model["name"]: model for model in document["models"]}
    assert models["bare"] == {
        "name": "bare", "platform": "onnxruntime_onnx", "backend": "onnxruntime",
        "versions": ["1"], "loadable_versions": ["1"], "state": "NOT_LOADED", "reason": "",
        # Never loaded: the tensors come from the ONNX file, as auto-complete would fill them.
        "inputs": [{"name": f"INPUT{i}", "datatype": "INT32", "shape": [-1, 16]} for i in (0, 1)],
        "outputs": [{"name": f"OUTPUT{i}", "datatype": "INT32", "shape": [-1, 16]}
                    for i in (0, 1)],
        "metadata": {"description": "simple's model file with a config that names no tensors",
                     "task": "arithmetic", "owner": "tests",
                     "labels": {"stage": "dev", "team": "platform"}, "links": {}},
        "error": "",
    }
    assert models["simple"]["state"] == "READY"
    assert models["simple"]["metadata"] == {}
    assert models["simple"]["inputs"][0] == {"name": "INPUT0", "datatype": "INT32",
                                             "shape": [-1, 16]}
    assert models["craft"]["state"] == "NOT_LOADED"
    assert [t["name"] for t in models["craft"]["inputs"]] == ["images"]
    assert models["broken_catalog"]["error"] == (
        'broken_catalog/catalog.toml:1:1: "task" must be a string, not an integer')
    assert models["broken_catalog"]["metadata"] == {}
    assert models["broken_catalog"]["inputs"]  # the config still says what it takes


def test_filters_by_label_and_task(server: ServerHandle) -> None:
    assert names(get(server, "/v2/catalog?task=arithmetic")[1]) == ["bare"]
    assert names(get(server, "/v2/catalog?label=stage=dev")[1]) == ["bare"]
    assert names(get(server, "/v2/catalog?label=stage=dev&label=team=platform")[1]) == ["bare"]
    assert names(get(server, "/v2/catalog?label=stage=dev&label=team=other")[1]) == []
    assert names(get(server, "/v2/catalog?label=pipeline%3Docr")[1]) == ["craft"]
    assert names(get(server, "/v2/catalog?task=text-detection&label=pipeline=ocr")[1]) == [
        "craft"]
    assert names(get(server, "/v2/catalog?task=nothing")[1]) == []


@pytest.mark.parametrize(("query", "message"), [
    ("label=stage", "catalog filter label='stage': expected label=KEY=VALUE"),
    ("label==dev", "catalog filter label='=dev': expected label=KEY=VALUE"),
    ("owner=tests", "catalog filter: unknown parameter 'owner' (expected 'label' or 'task')"),
    ("task=a&task=b", "catalog filter: 'task' is given more than once"),
    ("task=", "catalog filter: 'task' is empty"),
])
def test_a_bad_filter_is_a_400_with_the_reason(server: ServerHandle, query: str,
                                               message: str) -> None:
    assert get(server, f"/v2/catalog?{query}") == (400, {"error": message})


def test_the_catalog_is_in_the_model_repository_api_group(server: ServerHandle) -> None:
    assert get(server, "/v2/catalog", headers={}) == (
        403, {"error": "This API is restricted, expecting header 'catalog-key'"})
    host, port = server.http_url.split(":")
    connection = http.client.HTTPConnection(host, int(port), timeout=60)
    connection.request("POST", "/v2/catalog", headers=HEADER)
    assert connection.getresponse().status == 405
    connection.close()


def test_the_native_client_lists_and_filters_the_catalog(server: ServerHandle) -> None:
    with server.client() as client:
        entries = client.catalog()
        assert [entry.name for entry in entries] == ["bare", "broken_catalog", "craft",
                                                     "simple"]
        bare = entries[0]
        assert isinstance(bare, CatalogEntry)
        assert (bare.state, bare.inputs, bare.outputs) == ("NOT_LOADED", SIMPLE_INPUTS,
                                                           SIMPLE_OUTPUTS)
        assert bare.metadata["labels"] == {"stage": "dev", "team": "platform"}
        assert [e.name for e in client.catalog({"stage": "dev"}, task="arithmetic")] == ["bare"]
        assert [e.name for e in client.catalog(task="ocr")] == []
        index = {entry.name: entry for entry in client.index()}
        assert index["bare"].catalog["owner"] == "tests"

    async def asynchronously() -> list[str]:
        async with AsyncClient(server.url) as client:
            return [entry.name for entry in await client.catalog({"pipeline": "ocr"})]

    assert asyncio.run(asynchronously()) == ["craft"]


def test_a_changed_catalog_file_is_seen_and_loading_changes_the_state(
        server: ServerHandle, repository: Path) -> None:
    catalog = repository / "bare" / "catalog.toml"
    catalog.write_text(BARE_CATALOG.replace('stage = "dev"', 'stage = "prod"'), encoding="utf-8")
    try:
        assert names(get(server, "/v2/catalog?label=stage=prod")[1]) == ["bare"]
        with server.client() as client:
            client.load("bare")
            entry = next(e for e in client.catalog() if e.name == "bare")
            assert entry.state == "READY" and entry.inputs == SIMPLE_INPUTS
            client.unload("bare")
            entry = next(e for e in client.catalog() if e.name == "bare")
            assert (entry.state, entry.reason) == ("UNAVAILABLE", "unloaded")
            assert entry.inputs == SIMPLE_INPUTS  # still listed with what it takes
    finally:
        catalog.write_text(BARE_CATALOG, encoding="utf-8")
