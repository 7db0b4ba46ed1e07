"""Memory given back on unload (issue 37), end to end: a model of 100 MiB of weights (50
layers of 2 MiB) loaded and unloaded 30 times through tritonclient in EXPLICIT mode, in the
default placement (the server's own process, for onnxruntime and pytorch), leaves the resident
memory of the server's process tree (``/proc``) where a one-layer model of the same framework
left it, give or take half the model, after every unload, and its floor does not creep up from
the first ten cycles to the last ten; the server reports what
each load took and each unload gave back (index, metric, log line); and a model in processes
of its own, isolated or a python model's instances, takes them with it at unload, all their
memory reported as returned.

The bound: the one-layer model imports the framework and builds its one-time state, which
stays; the large model's every unload should then end where that one's ended. A leak of the
model (its weights held past the unload) adds 100 MiB per cycle and breaks the bound at once;
so do the 200 MiB glibc keeps in its heaps after an onnxruntime unload without
``malloc_trim``; the 46 MiB torch grows over 30 cycles without it (measured both, with the
give-back step taken out: bench/performance/unload_memory.py) raises the lowest of the last
ten readings about 30 MiB above the lowest of the first ten, twice the creep allowed. A torch
server's readings alternate between two levels 26 to 29 MiB apart from one unload to the next
(a CI run saw 329 and 355 MiB, another 290 and 318), which is why the bound is half the model
and the creep is judged on the floor, the lower level, which stays put.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest
import tritonclient.http as httpclient

from inferd.kernel.sdk.memory_meter import process_tree, resident_bytes
from tests.e2e.inferd_harness import ServerHandle, metric, wait_for
from tests.e2e.large_models import INPUTS, OUTPUTS, SIDE, WEIGHT_BYTES, WRITERS, write_python

CYCLES = 30
BOUND_BYTES = WEIGHT_BYTES // 2
CREEP_BYTES = 16 << 20  # the lowest of the last ten readings over the lowest of the first ten
ISOLATED = 'parameters { key: "INFERD_EXECUTOR" value { string_value: "isolated" } }\n'


def tree_resident(server: ServerHandle) -> int:
    held = resident_bytes(server.process.pid)
    assert held is not None, "the server's /proc entries cannot be read"
    return held


def unloaded_memory(client: httpclient.InferenceServerClient, name: str = "large"
                   ) -> dict[str, int]:
    """The index's ``memory`` of the unloaded ``name`` (empty until its unload is done)."""
    rows = client.get_model_repository_index()
    row = next(row for row in rows if row["name"] == name)
    memory: dict[str, int] = row.get("memory", {}) if row.get("state") == "UNAVAILABLE" else {}
    return memory


def load_infer_unload(client: httpclient.InferenceServerClient, kind: str,
                      name: str = "large") -> None:
    client.load_model(name)
    values = httpclient.InferInput(INPUTS[kind], [1, SIDE], "FP32")
    values.set_data_from_numpy(np.ones((1, SIDE), np.float32))
    result = client.infer(name, [values])
    assert result.as_numpy(OUTPUTS[kind]).shape == (1, SIDE)
    client.unload_model(name)


@pytest.mark.filterwarnings("ignore:`torch.jit.script` is deprecated")
@pytest.mark.parametrize("kind", ["onnx", "torchscript"])
def test_thirty_loads_and_unloads_leave_the_server_where_the_framework_left_it(
        inferd: Any, tmp_path: Path, kind: str) -> None:
    repository = tmp_path / "repository"
    WRITERS[kind](repository, "large")
    WRITERS[kind](repository, "small", layers=1)
    server: ServerHandle = inferd.start(repository, "--model-control-mode", "explicit")
    client = httpclient.InferenceServerClient(server.http_url, network_timeout=300.0)
    after_unloads: list[int] = []
    try:
        load_infer_unload(client, kind, "small")
        wait_for(lambda: unloaded_memory(client, "small"), "the small model's unload", server)
        warm = tree_resident(server)
        load_infer_unload(client, kind)
        first = wait_for(lambda: unloaded_memory(client), "the first unload's report", server)
        after_unloads.append(tree_resident(server))
        for _ in range(CYCLES - 1):
            load_infer_unload(client, kind)
            after_unloads.append(tree_resident(server))
        last = wait_for(lambda: unloaded_memory(client), "the last unload's report", server)
    finally:
        client.close()

    readings = (f"the framework warm, the server held {warm >> 20} MiB; after the unloads of "
                f"the large model: {[held >> 20 for held in after_unloads]} MiB")
    assert max(after_unloads) <= warm + BOUND_BYTES, readings
    assert min(after_unloads[-10:]) <= min(after_unloads[:10]) + CREEP_BYTES, readings
    for report in (first, last):
        # What the load took and the unload gave back: each at least half the weights (a load
        # may reuse heap a previous unload freed but the allocator kept: a CI run measured a
        # load of the 100 MiB model as 74 MiB of growth).
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


def test_a_python_model_s_stubs_end_at_unload_and_all_they_held_is_reported(
        inferd: Any, tmp_path: Path) -> None:
    repository = tmp_path / "repository"
    write_python(repository, "large", count=2)
    server: ServerHandle = inferd.start(repository, "--model-control-mode", "explicit")
    client = httpclient.InferenceServerClient(server.http_url, network_timeout=300.0)
    try:
        before = set(process_tree(server.process.pid))
        client.load_model("large")
        values = httpclient.InferInput("INPUT", [1], "FP32")
        values.set_data_from_numpy(np.full(1, 3.0, np.float32))
        assert client.infer("large", [values]).as_numpy("OUTPUT").tolist() == [3.0]
        stubs = set(process_tree(server.process.pid)) - before
        assert len(stubs) >= 2, "the two instances' processes are not below the server"
        client.unload_model("large")
        report = wait_for(lambda: unloaded_memory(client), "the unload's report", server)
    finally:
        client.close()

    assert not [pid for pid in stubs if Path(f"/proc/{pid}").exists()], (
        "a python instance's process outlived its model's unload")
    # Two processes of more than a model's weights each came back.
    assert report["returned_resident_bytes"] >= 2 * WEIGHT_BYTES, report
