"""The sequence batcher end to end, through tritonclient over HTTP and gRPC, against one real
``inferd serve``:

- ``accumulate`` (the example ONNX model with implicit state): each interleaved sequence gets
  its own running sum, kept by the server between requests and reset at START;
- ``sequence_echo`` (a python model, direct strategy, ``max_batch_size`` 2): the control
  values the model sees (START as INT32, END as FP32, READY as BOOL, a UINT64 CORRID), null
  requests with READY false filling the slot of a sequence with nothing to send;
- ``sequence_echo_oldest`` (the same model, oldest strategy, a string CORRID): no null
  requests;
- ``state_counter`` (a python model with implicit state through the state names, its initial
  state read from a file in its ``initial_state/`` folder);
- ``request.flags()`` in a python model (START, END, both), and sequence parameters of the
  wrong type refused with Triton's words over HTTP and gRPC, the sequence untouched;
- Triton's errors (no correlation id, no START first, batch above 1), a START on a live id
  (Triton's warning, the sequence restarts), idle expiry, statistics; ``simple`` serves
  throughout.
"""

from __future__ import annotations

import concurrent.futures
import json
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

import grpc
import numpy as np
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
from tritonclient.grpc import service_pb2, service_pb2_grpc
from tritonclient.utils import InferenceServerException
from tests.e2e.inferd_harness import InferdHarness, ServerHandle

PROTOCOLS = ("http", "grpc")
PYTHON_MODELS = Path(__file__).resolve().parents[1] / "plugins" / "python_models"
IDLE_SECS = 0.6  # sequence_echo's max_sequence_idle_microseconds


@pytest.fixture(scope="module")
def server(module_inferd: InferdHarness) -> ServerHandle:
    root: Path = module_inferd.repository("simple", "accumulate")
    module_inferd.copy_models(root, PYTHON_MODELS, "sequence_echo", "state_counter")
    oldest = (root / "sequence_echo" / "config.pbtxt").read_text(encoding="utf-8")
    oldest = oldest.replace('name: "sequence_echo"', 'name: "sequence_echo_oldest"').replace(
        "sequence_batching {",
        "sequence_batching {\n  oldest { max_candidate_sequences: 4 }").replace(
        "data_type: TYPE_UINT64", "data_type: TYPE_STRING")
    (root / "sequence_echo_oldest" / "1").mkdir(parents=True)
    (root / "sequence_echo_oldest" / "config.pbtxt").write_text(oldest, encoding="utf-8")
    (root / "sequence_echo_oldest" / "1" / "model.py").write_bytes(
        (root / "sequence_echo" / "1" / "model.py").read_bytes())
    return module_inferd.start(root)


def connect(server: ServerHandle, protocol: str) -> Any:
    if protocol == "http":
        return httpclient.InferenceServerClient(server.http_url, concurrency=8)
    return grpcclient.InferenceServerClient(server.grpc_url)


def send(client: Any, model: str, value: float, sequence: int | str, start: bool = False,
         end: bool = False, rows: int = 1) -> Any:
    module: Any = httpclient if isinstance(client, httpclient.InferenceServerClient) else grpcclient
    tensor = module.InferInput("INPUT", [rows, 1], "FP32")
    tensor.set_data_from_numpy(np.full((rows, 1), value, np.float32))
    return client.infer(model, [tensor], sequence_id=sequence, sequence_start=start,
                        sequence_end=end)


def total(result: Any) -> float:
    return float(result.as_numpy("OUTPUT")[0, 0])


@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_interleaved_sequences_keep_their_own_implicit_state(
        server: ServerHandle, protocol: str) -> None:
    client = connect(server, protocol)
    base = 1000 if protocol == "http" else 2000
    ids = [base + n for n in range(3)]
    sums = dict.fromkeys(ids, 0.0)
    for step in range(4):
        for index, sequence in enumerate(ids):
            value = float(step * 10 + index + 1)
            sums[sequence] += value
            result = send(client, "accumulate", value, sequence, start=step == 0,
                          end=step == 3)
            assert total(result) == sums[sequence]
            assert [o.name if protocol == "grpc" else o["name"]
                    for o in _outputs(result, protocol)] == ["OUTPUT"]  # no state output
    # A new sequence on a finished id starts from the initial state again.
    assert total(send(client, "accumulate", 5.0, ids[0], start=True)) == 5.0
    assert total(send(client, "accumulate", 1.0, ids[0], end=True)) == 6.0


def _outputs(result: Any, protocol: str) -> list[Any]:
    if protocol == "http":
        return list(result.get_response()["outputs"])
    return list(result.get_response().outputs)


def test_a_python_model_keeps_implicit_state_from_its_initial_state_file(
        server: ServerHandle) -> None:
    client = connect(server, "http")

    def add(value: int, sequence: int, **flags: bool) -> int:
        tensor = httpclient.InferInput("INPUT", [1, 1], "INT32")
        tensor.set_data_from_numpy(np.array([[value]], np.int32))
        result = client.infer("state_counter", [tensor], sequence_id=sequence, **flags)
        return int(result.as_numpy("OUTPUT")[0, 0])

    assert add(1, 91, sequence_start=True) == 101
    assert add(5, 92, sequence_start=True) == 105
    assert add(2, 91) == 103
    assert add(3, 91, sequence_end=True) == 106
    assert add(1, 92, sequence_end=True) == 106


def test_string_correlation_ids_over_grpc(server: ServerHandle) -> None:
    client = connect(server, "grpc")
    assert total(send(client, "accumulate", 2.0, "speaker-a", start=True)) == 2.0
    assert total(send(client, "accumulate", 2.0, "speaker-b", start=True)) == 2.0
    assert total(send(client, "accumulate", 3.0, "speaker-a", end=True)) == 5.0
    assert total(send(client, "accumulate", 4.0, "speaker-b", end=True)) == 6.0


def test_server_metadata_lists_the_sequence_extension(server: ServerHandle) -> None:
    assert "sequence" in connect(server, "grpc").get_server_metadata().extensions
    assert "sequence" in connect(server, "http").get_server_metadata()["extensions"]


@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_the_model_sees_tritons_control_values(server: ServerHandle, protocol: str) -> None:
    client = connect(server, protocol)
    sequence = 31 if protocol == "http" else 32
    first = send(client, "sequence_echo", 1.5, sequence, start=True)
    middle = send(client, "sequence_echo", 2.0, sequence)
    last = send(client, "sequence_echo", 0.5, sequence, end=True)
    seen = [(int(r.as_numpy("START_SEEN")[0, 0]), float(r.as_numpy("END_SEEN")[0, 0]),
             bool(r.as_numpy("READY_SEEN")[0, 0]), r.as_numpy("CORRID_SEEN")[0, 0])
            for r in (first, middle, last)]
    corrid = str(sequence).encode()
    assert seen == [(1, 0.0, True, corrid), (0, 0.0, True, corrid), (0, 1.0, True, corrid)]
    assert [total(r) for r in (first, middle, last)] == [1.5, 3.5, 4.0]


@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_a_python_model_sees_tritons_request_flags(server: ServerHandle, protocol: str) -> None:
    """``request.flags()``: START (1) on the first request, END (2) on the last, both (3) on
    a one-request sequence; ``pb_utils`` has the constants, with Triton's values."""
    client = connect(server, protocol)
    sequence = 33 if protocol == "http" else 34
    results = [send(client, "sequence_echo", 1.0, sequence, start=True),
               send(client, "sequence_echo", 1.0, sequence),
               send(client, "sequence_echo", 1.0, sequence, end=True),
               send(client, "sequence_echo", 1.0, sequence + 100, start=True, end=True)]
    seen = [r.as_numpy("FLAGS_SEEN")[0].tolist() for r in results]
    assert seen == [[1, 1, 2], [0, 1, 2], [2, 1, 2], [3, 1, 2]]


def raw_infer(server: ServerHandle, value: float, parameters: dict[str, Any]
              ) -> tuple[int, Any]:
    """POST an ``accumulate`` request with these parameters: (status, body)."""
    body = {"parameters": parameters,
            "inputs": [{"name": "INPUT", "shape": [1, 1], "datatype": "FP32", "data": [value]}]}
    request = urllib.request.Request(f"http://{server.http_url}/v2/models/accumulate/infer",
                                     data=json.dumps(body).encode(), method="POST",
                                     headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(request, timeout=30) as response:
            return response.status, json.loads(response.read())["outputs"][0]["data"]
    except urllib.error.HTTPError as error:
        return error.code, json.loads(error.read())


def test_sequence_parameters_of_the_wrong_json_type_are_refused_naming_them(
        server: ServerHandle) -> None:
    """Triton's words (Triton answers 500: a client's mistake is a 400 here); the sequence
    the refused requests name goes on as if they had not been sent."""
    assert raw_infer(server, 1.0, {"sequence_id": 81, "sequence_start": True}) == (200, [1.0])
    not_boolean = "attempt to access JSON non-boolean as boolean"
    not_id = "Unable to parse 'sequence_id': attempt to access JSON non-string as string"
    refused = [
        ({"sequence_id": 81, "sequence_start": 1},
         f"Unable to parse 'sequence_start': {not_boolean}"),
        ({"sequence_id": 81, "sequence_end": "true"},
         f"Unable to parse 'sequence_end': {not_boolean}"),
        ({"sequence_id": -81}, not_id),
        ({"sequence_id": 81.0}, not_id),
        ({"sequence_id": 2**64}, not_id),
        ({"sequence_id": True, "sequence_end": True}, not_id),
    ]
    for parameters, message in refused:
        assert raw_infer(server, 100.0, parameters) == (400, {"error": message}), parameters
    assert raw_infer(server, 2.0, {"sequence_id": 81}) == (200, [3.0])
    assert raw_infer(server, 4.0, {"sequence_id": 81, "sequence_end": True}) == (200, [7.0])


@pytest.mark.parametrize(("parameter", "choice", "value", "expected"), [
    ("sequence_start", "int64_param", 1, "bool_param"),
    ("sequence_end", "string_param", "true", "bool_param"),
    ("sequence_id", "bool_param", True, "int64_param or string_param")])
def test_sequence_parameters_of_the_wrong_type_over_grpc_get_tritons_error(
        server: ServerHandle, parameter: str, choice: str, value: Any, expected: str) -> None:
    """A raw ModelInferRequest (tritonclient refuses to send these keys as parameters)."""
    client = connect(server, "grpc")
    send(client, "accumulate", 1.0, 82, start=True)
    request = service_pb2.ModelInferRequest(model_name="accumulate")
    request.parameters["sequence_id"].int64_param = 82
    setattr(request.parameters[parameter], choice, value)
    tensor = request.inputs.add(name="INPUT", datatype="FP32", shape=[1, 1])
    tensor.contents.fp32_contents.append(100.0)
    with grpc.insecure_channel(server.grpc_url) as channel:
        stub = service_pb2_grpc.GRPCInferenceServiceStub(channel)
        with pytest.raises(grpc.RpcError) as raised:
            stub.ModelInfer(request, timeout=30)
    assert raised.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert raised.value.details() == (
        f"invalid value type for '{parameter}' parameter, expected {expected}.")
    assert total(send(client, "accumulate", 2.0, 82, end=True)) == 3.0


def test_direct_strategy_fills_an_idle_slot_with_a_null_request(server: ServerHandle) -> None:
    client = connect(server, "http")
    send(client, "sequence_echo", 1.0, 41, start=True)  # slot 0
    send(client, "sequence_echo", 1.0, 42, start=True)  # slot 1
    # Only the sequence in slot 1 sends: the batch still has slot 0, as a null request.
    alone = send(client, "sequence_echo", 1.0, 42)
    assert int(alone.as_numpy("BATCH")[0, 0]) == 2
    assert total(alone) == 2.0
    send(client, "sequence_echo", 1.0, 41, end=True)
    send(client, "sequence_echo", 1.0, 42, end=True)


def test_oldest_strategy_batches_only_waiting_sequences(server: ServerHandle) -> None:
    client = connect(server, "http")
    send(client, "sequence_echo_oldest", 1.0, "a", start=True)
    send(client, "sequence_echo_oldest", 1.0, "b", start=True)
    alone = send(client, "sequence_echo_oldest", 1.0, "b")
    assert int(alone.as_numpy("BATCH")[0, 0]) == 1
    assert alone.as_numpy("CORRID_SEEN")[0, 0] == b"b"
    assert total(alone) == 2.0
    send(client, "sequence_echo_oldest", 1.0, "a", end=True)
    send(client, "sequence_echo_oldest", 1.0, "b", end=True)


@pytest.mark.parametrize("model", ["sequence_echo", "sequence_echo_oldest"])
def test_concurrent_sequences_each_get_their_own_sums(server: ServerHandle, model: str) -> None:
    """More sequences than slots (2 for direct, 4 for oldest): the rest wait in the backlog
    for a slot, and every sequence's sum is its own."""
    def run(index: int) -> list[float]:
        client = connect(server, "grpc")
        sequence: int | str = 500 + index if model == "sequence_echo" else f"c{index}"
        return [total(send(client, model, float(index + 1), sequence, start=step == 0,
                           end=step == 4)) for step in range(5)]

    with concurrent.futures.ThreadPoolExecutor(6) as pool:
        sums = list(pool.map(run, range(6)))
    assert sums == [[float((index + 1) * (step + 1)) for step in range(5)] for index in range(6)]


@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_requests_that_cannot_join_a_sequence_get_tritons_errors(
        server: ServerHandle, protocol: str) -> None:
    client = connect(server, protocol)
    module: Any = httpclient if protocol == "http" else grpcclient
    tensor = module.InferInput("INPUT", [1, 1], "FP32")
    tensor.set_data_from_numpy(np.ones((1, 1), np.float32))
    cases = [
        ({}, "inference request to model 'accumulate' must specify a non-zero or non-empty "
             "correlation ID"),
        ({"sequence_id": 777}, "inference request for sequence 777 to model 'accumulate' "
                               "must specify the START flag on the first request of the "
                               "sequence"),
    ]
    for parameters, message in cases:
        with pytest.raises(InferenceServerException) as raised:
            client.infer("accumulate", [tensor], **parameters)
        assert message in raised.value.message()
        assert raised.value.status() in ("400", "StatusCode.INVALID_ARGUMENT")
    with pytest.raises(InferenceServerException, match="must specify batch-size 1 due to "
                                                       "requirements of sequence batcher"):
        send(client, "accumulate", 1.0, 778, start=True, rows=2)
    ones = np.ones((1, 16), np.int32)
    inputs = []
    for name in ("INPUT0", "INPUT1"):
        inputs.append(module.InferInput(name, [1, 16], "INT32"))
        inputs[-1].set_data_from_numpy(ones)
    np.testing.assert_array_equal(client.infer("simple", inputs).as_numpy("OUTPUT0"), ones * 2)


def test_a_start_on_a_live_sequence_restarts_it_with_tritons_warning(
        server: ServerHandle) -> None:
    client = connect(server, "http")
    send(client, "accumulate", 5.0, 61, start=True)
    assert total(send(client, "accumulate", 1.0, 61, start=True)) == 1.0
    assert total(send(client, "accumulate", 2.0, 61, end=True)) == 3.0
    assert ("sequence 61 for model 'accumulate' has a conflict. The previous sequence did not "
            "end before this sequence start.") in server.log()


def test_an_idle_sequence_is_released(server: ServerHandle) -> None:
    client = connect(server, "http")
    send(client, "sequence_echo", 1.0, 71, start=True)
    assert total(send(client, "sequence_echo", 1.0, 71)) == 2.0
    time.sleep(IDLE_SECS + 0.4)
    with pytest.raises(InferenceServerException, match="must specify the START flag"):
        send(client, "sequence_echo", 1.0, 71)


def test_statistics_count_real_requests(server: ServerHandle) -> None:
    client = connect(server, "http")

    def counts() -> tuple[int, int]:
        stats = client.get_inference_statistics("accumulate")["model_stats"][0]
        return stats["inference_count"], stats["execution_count"]

    before = counts()
    for step in range(3):
        send(client, "accumulate", 1.0, 81, start=step == 0, end=step == 2)
    after = counts()
    assert after[0] - before[0] == 3
    assert after[1] - before[1] == 3
