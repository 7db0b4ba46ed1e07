"""Memory given back on unload (issue 37), end to end: a model of 100 MiB of weights loaded
and unloaded 30 times through tritonclient in EXPLICIT mode, in the default placement (the
server's own process, for onnxruntime and pytorch), leaves the resident memory of the server's
process tree (``/proc``) where the first cycle left it, give or take half a model; the
server reports what each load took and each unload gave back (index, metric, log line); and a
model in an executor process of its own takes that process with it at unload, all its memory
reported as returned.

The bound: after the first cycle the frameworks are imported and their one-time state is
built, so every later cycle should end where the first ended. A leak of the model (its
weights held past the unload) adds 100 MiB per cycle and breaks the bound at the first leaked
cycle; a leak of a tenth of it breaks it by the sixth. Half a model leaves room for the
allocator's slack (a few MiB over 30 cycles here; ``bench/unload_memory.py`` prints them).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest
import tritonclient.http as httpclient

from inferd.kernel.observability.memory_meter import process_tree, resident_bytes
from tests.e2e.inferd_harness import ServerHandle, metric, wait_for
from tests.e2e.large_models import INPUTS, OUTPUTS, SIDE, WEIGHT_BYTES, WRITERS

CYCLES = 30
BOUND_BYTES = WEIGHT_BYTES // 2
ISOLATED = 'parameters { key: "INFERD_EXECUTOR" value { string_value: "isolated" } }\n'


def tree_resident(server: ServerHandle) -> int:
    held = resident_bytes(server.process.pid)
    assert held is not None, "the server's /proc entries cannot be read"
    return held


def unloaded_memory(client: httpclient.InferenceServerClient) -> dict[str, int]:
    """The index's ``memory`` of the unloaded ``large`` (empty until its unload is done)."""
    rows = client.get_model_repository_index()
    row = next(row for row in rows if row["name"] == "large")
    assert row.get("state") in ("UNAVAILABLE", "UNLOADING", "READY")
    memory: dict[str, int] = row.get("memory", {}) if row.get("state") == "UNAVAILABLE" else {}
    return memory


def load_infer_unload(client: httpclient.InferenceServerClient, kind: str) -> None:
    client.load_model("large")
    values = httpclient.InferInput(INPUTS[kind], [1, SIDE], "FP32")
    values.set_data_from_numpy(np.ones((1, SIDE), np.float32))
    result = client.infer("large", [values])
    assert result.as_numpy(OUTPUTS[kind]).shape == (1, SIDE)
    client.unload_model("large")


@pytest.mark.filterwarnings("ignore:`torch.jit.script` is deprecated")
@pytest.mark.parametrize("kind", ["onnx", "torchscript"])
def test_thirty_loads_and_unloads_leave_the_server_where_the_first_left_it(
        inferd: Any, tmp_path: Path, kind: str) -> None:
    repository = tmp_path / "repository"
    WRITERS[kind](repository, "large")
    server: ServerHandle = inferd.start(repository, "--model-control-mode", "explicit")
    client = httpclient.InferenceServerClient(server.http_url, network_timeout=300.0)
    try:
        load_infer_unload(client, kind)
        first = wait_for(lambda: unloaded_memory(client), "the first unload's report", server)
        after_first = tree_resident(server)
        highest = after_first
        for _ in range(CYCLES - 1):
            load_infer_unload(client, kind)
            highest = max(highest, tree_resident(server))
        last = wait_for(lambda: unloaded_memory(client), "the last unload's report", server)
        after_last = tree_resident(server)
    finally:
        client.close()

    assert after_last <= after_first + BOUND_BYTES, (
        f"{CYCLES} cycles grew the server from {after_first >> 20} MiB after the first to "
        f"{after_last >> 20} MiB after the last (highest {highest >> 20} MiB)")
    for report in (first, last):
        # What the load took and the unload gave back: each about the weights.
        assert report["loaded_resident_bytes"] >= WEIGHT_BYTES // 2, report
        assert report["returned_resident_bytes"] >= WEIGHT_BYTES // 2, report
    labels = {"memory": "resident", "model": "large", "version": "1"}  # as rendered
    assert metric(server, "inferd_model_unload_returned_bytes", **labels) == float(
        last["returned_resident_bytes"])
    assert metric(server, "inferd_model_unload_footprint_bytes", **labels) == float(
        last["loaded_resident_bytes"])
    assert server.log().count("model 'large' version 1 unloaded: ") == CYCLES


def test_a_model_in_its_own_process_takes_it_along_and_reports_all_it_held(
        inferd: Any, tmp_path: Path) -> None:
    repository = tmp_path / "repository"
    model = WRITERS["onnx"](repository, "large")
    with (model / "config.pbtxt").open("a") as config:
        config.write(ISOLATED)
    server: ServerHandle = inferd.start(repository, "--model-control-mode", "explicit")
    client = httpclient.InferenceServerClient(server.http_url, network_timeout=300.0)
    try:
        before = set(process_tree(server.process.pid))
        client.load_model("large")
        executors = set(process_tree(server.process.pid)) - before
        assert executors, "the isolated model's executor process is not below the server"
        held = sum(resident_bytes(pid) or 0 for pid in executors)
        client.unload_model("large")
        report = wait_for(lambda: unloaded_memory(client), "the unload's report", server)
    finally:
        client.close()

    assert not [pid for pid in executors if Path(f"/proc/{pid}").exists()], (
        "the isolated executor process outlived its model's unload")
    # It ended: everything it held came back, more than the weights it had loaded.
    assert report["returned_resident_bytes"] >= max(WEIGHT_BYTES, held // 2), report
    assert "exited with its model" in server.log()
