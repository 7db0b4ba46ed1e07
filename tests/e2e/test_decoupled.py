"""Decoupled models and the generate extension end to end, against one real ``inferd serve``:

- ``repeat`` (a decoupled python model, responses sent from a thread of its own after
  ``execute`` returned): over gRPC ``ModelStreamInfer`` every response in order, an error in
  the middle that does not end the stream, the final flag with and without the empty final
  response, several requests on one stream, an ``execute`` that raises;
- a non-streaming call to a decoupled model: Triton's 501 / UNIMPLEMENTED and messages;
- a BLS call with ``decoupled=True`` iterating the responses of ``repeat``;
- an ensemble whose last step is decoupled (``strings`` then ``stream_words``), streamed:
  one ensemble response per word, with the first step's outputs in each;
- ``generate`` and ``generate_stream`` (raw HTTP, Server-Sent Events) on python models, on
  the ONNX ``simple`` and on the decoupled ones, including the example ``stream_words``;
- ``simple`` serves throughout.
"""

from __future__ import annotations

import http.client
import json
import queue
import shutil
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
from tritonclient.utils import InferenceServerException
from tests.e2e.inferd_harness import InferdHarness, ServerHandle

PYTHON_MODELS = Path(__file__).resolve().parents[1] / "plugins" / "python_models"
WAIT_SECS = 30.0


@pytest.fixture(scope="module")
def server(module_inferd: InferdHarness) -> ServerHandle:
    root: Path = module_inferd.repository("simple", "stream_words")
    module_inferd.copy_models(root, PYTHON_MODELS, "repeat", "add_sub", "bls_decoupled",
                              "strings")
    # repeat with an optional input it never reads: Triton's range form of the message.
    shutil.copytree(root / "repeat" / "1", root / "repeat_optional" / "1")
    config = (root / "repeat" / "config.pbtxt").read_text(encoding="utf-8")
    (root / "repeat_optional" / "config.pbtxt").write_text(
        config.replace('name: "repeat"', 'name: "repeat_optional"').replace(
            'input [ { name: "IN" data_type: TYPE_INT32 dims: [ -1 ] } ]',
            'input [ { name: "IN" data_type: TYPE_INT32 dims: [ -1 ] },\n'
            '        { name: "DELAY" data_type: TYPE_INT32 dims: [ 1 ] optional: true } ]'),
        encoding="utf-8")
    (root / "shout_stream" / "1").mkdir(parents=True)
    (root / "shout_stream" / "config.pbtxt").write_text(SHOUT_STREAM, encoding="utf-8")
    (root / "echo_parameters" / "1").mkdir(parents=True)
    (root / "echo_parameters" / "config.pbtxt").write_text(ECHO_PARAMETERS, encoding="utf-8")
    (root / "echo_parameters" / "1" / "model.py").write_text(ECHO_PARAMETERS_PY,
                                                             encoding="utf-8")
    return module_inferd.start(root)


ECHO_PARAMETERS = """
name: "echo_parameters"
backend: "python"
input [ { name: "IN" data_type: TYPE_INT32 dims: [ 1 ] } ]
output [ { name: "PARAMETERS" data_type: TYPE_STRING dims: [ 1 ] } ]
"""
ECHO_PARAMETERS_PY = """
import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        return [pb_utils.InferenceResponse([pb_utils.Tensor(
            "PARAMETERS", np.array([request.parameters()], dtype=object))])
            for request in requests]
"""


SHOUT_STREAM = """
name: "shout_stream"
platform: "ensemble"
input [ { name: "TEXT" data_type: TYPE_STRING dims: [ 1 ] } ]
output [ { name: "WORD" data_type: TYPE_STRING dims: [ 1 ] },
         { name: "LENGTH" data_type: TYPE_INT32 dims: [ -1 ] } ]
ensemble_scheduling { step [
  { model_name: "strings" model_version: -1
    input_map { key: "TEXT" value: "TEXT" }
    output_map [ { key: "UPPER" value: "upper_text" }, { key: "LENGTH" value: "LENGTH" } ] },
  { model_name: "stream_words" model_version: -1
    input_map { key: "text_input" value: "upper_text" }
    output_map { key: "text_output" value: "WORD" } }
] }
"""


def stream(server: ServerHandle, requests: list[tuple[list[int], str, bool]]) -> list[Any]:
    """Send ``(IN values, request id, empty final response)`` requests on one stream; every
    response (or error) until each request's final one."""
    client = grpcclient.InferenceServerClient(server.grpc_url)
    answers: queue.Queue[Any] = queue.Queue()
    client.start_stream(callback=lambda result, error: answers.put(error or result))
    open_requests = 0
    for values, request_id, empty_final in requests:
        tensor = grpcclient.InferInput("IN", [len(values)], "INT32")
        tensor.set_data_from_numpy(np.array(values, np.int32))
        client.async_stream_infer("repeat", [tensor], request_id=request_id,
                                  enable_empty_final_response=empty_final)
        open_requests += 1
    received = []
    try:
        while open_requests:
            answer = answers.get(timeout=WAIT_SECS)
            received.append(answer)
            if isinstance(answer, InferenceServerException):
                continue
            final = answer.get_response().parameters.get("triton_final_response")
            if final is not None and final.bool_param:
                open_requests -= 1
    finally:
        client.stop_stream()
    return received


def summary(answer: Any) -> Any:
    if isinstance(answer, InferenceServerException):
        return ("error", answer.message())
    response = answer.get_response()
    final = response.parameters["triton_final_response"].bool_param
    if not response.outputs:
        return (response.id, None, final)
    return (response.id, int(answer.as_numpy("OUT")[0]), final)


def test_a_decoupled_model_streams_every_response_in_order(server: ServerHandle) -> None:
    received = [summary(a) for a in stream(server, [([5, 6, -1, 7], "r1", True)])]
    assert received == [("r1", 5, False), ("r1", 6, False),
                        ("error", "element 2 is negative: -1"), ("r1", 7, False),
                        ("r1", None, True)]


def test_several_requests_on_one_stream_answer_in_request_order(server: ServerHandle) -> None:
    received = [summary(a) for a in stream(server, [([1, 2], "a", True), ([3], "b", True)])]
    assert received == [("a", 1, False), ("a", 2, False), ("a", None, True),
                        ("b", 3, False), ("b", None, True)]


def test_without_the_empty_final_response_the_stream_carries_only_responses(
        server: ServerHandle) -> None:
    client = grpcclient.InferenceServerClient(server.grpc_url)
    answers: queue.Queue[Any] = queue.Queue()
    client.start_stream(callback=lambda result, error: answers.put(error or result))
    tensor = grpcclient.InferInput("IN", [2], "INT32")
    tensor.set_data_from_numpy(np.array([8, 9], np.int32))
    client.async_stream_infer("repeat", [tensor], request_id="plain")
    try:
        got = [answers.get(timeout=WAIT_SECS) for _ in range(2)]
        with pytest.raises(queue.Empty):
            answers.get(timeout=0.5)
    finally:
        client.stop_stream()
    assert [int(a.as_numpy("OUT")[0]) for a in got] == [8, 9]


def test_a_stream_request_missing_inputs_gets_tritons_message(server: ServerHandle) -> None:
    client = grpcclient.InferenceServerClient(server.grpc_url)
    answers: queue.Queue[Any] = queue.Queue()
    client.start_stream(callback=lambda result, error: answers.put(error or result))
    delay = grpcclient.InferInput("DELAY", [1], "INT32")
    delay.set_data_from_numpy(np.array([1], np.int32))
    one = np.ones((1, 16), np.int32)
    only_first = grpcclient.InferInput("INPUT0", [1, 16], "INT32")
    only_first.set_data_from_numpy(one)
    try:
        client.async_stream_infer("repeat_optional", [delay], request_id="opt")
        client.async_stream_infer("simple", [only_first])
        got = [answers.get(timeout=WAIT_SECS) for _ in range(2)]
    finally:
        client.stop_stream()
    assert [answer.message() for answer in got] == [
        "[request id: opt] expected number of inputs between 1 and 2 but got 1 inputs for "
        "model 'repeat_optional'. Got input(s) ['DELAY'], but missing required input(s) "
        "['IN']. Please provide all required input(s).",
        "[request id: <id_unknown>] expected 2 inputs but got 1 inputs for model 'simple'. "
        "Got input(s) ['INPUT0'], but missing required input(s) ['INPUT1']. Please provide "
        "all required input(s).",
    ]


def test_a_model_that_is_not_decoupled_marks_its_one_stream_response_final(
        server: ServerHandle) -> None:
    client = grpcclient.InferenceServerClient(server.grpc_url)
    answers: queue.Queue[Any] = queue.Queue()
    client.start_stream(callback=lambda result, error: answers.put(error or result))
    inputs = []
    for name in ("INPUT0", "INPUT1"):
        tensor = grpcclient.InferInput(name, [1, 16], "INT32")
        tensor.set_data_from_numpy(np.ones((1, 16), np.int32))
        inputs.append(tensor)
    try:
        # Asked for an empty final response or not, its one response is final and alone
        # (Triton sends empty final responses for decoupled models only); the stream's next
        # request shows nothing else came in between.
        client.async_stream_infer("simple", inputs, request_id="one",
                                  enable_empty_final_response=True)
        client.async_stream_infer("simple", inputs, request_id="two")
        got = [answers.get(timeout=WAIT_SECS) for _ in range(2)]
    finally:
        client.stop_stream()
    assert [(a.get_response().id, a.get_response().parameters["triton_final_response"].bool_param,
             int(a.as_numpy("OUTPUT0").sum())) for a in got] == [("one", True, 32),
                                                                 ("two", True, 32)]


def test_a_request_may_get_no_response_but_the_final_flag(server: ServerHandle) -> None:
    assert [summary(a) for a in stream(server, [([], "none", True)])] == [("none", None, True)]


def test_an_execute_that_raises_ends_the_request_with_the_error(server: ServerHandle) -> None:
    [answer] = stream_errors(server, [-999])
    assert "asked to fail" in answer


def stream_errors(server: ServerHandle, values: list[int]) -> list[str]:
    client = grpcclient.InferenceServerClient(server.grpc_url)
    answers: queue.Queue[Any] = queue.Queue()
    client.start_stream(callback=lambda result, error: answers.put(error or result))
    tensor = grpcclient.InferInput("IN", [len(values)], "INT32")
    tensor.set_data_from_numpy(np.array(values, np.int32))
    client.async_stream_infer("repeat", [tensor])
    try:
        answer = answers.get(timeout=WAIT_SECS)
    finally:
        client.stop_stream()
    assert isinstance(answer, InferenceServerException), answer
    return [answer.message()]


def test_a_non_streaming_call_to_a_decoupled_model_gets_tritons_answer(
        server: ServerHandle) -> None:
    values = np.array([1, 2], np.int32)
    http_input = httpclient.InferInput("IN", [2], "INT32")
    http_input.set_data_from_numpy(values)
    with pytest.raises(InferenceServerException) as http_error:
        httpclient.InferenceServerClient(server.http_url).infer("repeat", [http_input])
    assert http_error.value.status() == "501"
    assert http_error.value.message() == (
        "HTTP end point doesn't support models with decoupled transaction policy")
    grpc_input = grpcclient.InferInput("IN", [2], "INT32")
    grpc_input.set_data_from_numpy(values)
    with pytest.raises(InferenceServerException) as grpc_error:
        grpcclient.InferenceServerClient(server.grpc_url).infer("repeat", [grpc_input])
    assert grpc_error.value.status() == "StatusCode.UNIMPLEMENTED"
    assert grpc_error.value.message() == (
        "ModelInfer RPC doesn't support models with decoupled transaction policy")
    assert_simple_serves(server)


def assert_simple_serves(server: ServerHandle) -> None:
    client = httpclient.InferenceServerClient(server.http_url)
    ones = np.ones((1, 16), np.int32)
    inputs = [httpclient.InferInput(name, [1, 16], "INT32") for name in ("INPUT0", "INPUT1")]
    for tensor in inputs:
        tensor.set_data_from_numpy(ones)
    np.testing.assert_array_equal(client.infer("simple", inputs).as_numpy("OUTPUT0"), ones * 2)


def test_a_bls_call_iterates_a_decoupled_models_responses(server: ServerHandle) -> None:
    client = httpclient.InferenceServerClient(server.http_url)
    tensor = httpclient.InferInput("IN", [4], "INT32")
    tensor.set_data_from_numpy(np.array([1, 2, -3, 4], np.int32))
    result = client.infer("bls_decoupled", [tensor])
    assert [int(result.as_numpy(name)[0]) for name in ("SUM", "COUNT", "ERRORS")] == [7, 3, 1]


def test_an_ensemble_ending_in_a_decoupled_step_streams_its_responses(
        server: ServerHandle) -> None:
    client = grpcclient.InferenceServerClient(server.grpc_url)
    answers: queue.Queue[Any] = queue.Queue()
    client.start_stream(callback=lambda result, error: answers.put(error or result))
    text = grpcclient.InferInput("TEXT", [1], "BYTES")
    text.set_data_from_numpy(np.array([b"quiet words here"], dtype=object))
    client.async_stream_infer("shout_stream", [text], enable_empty_final_response=True)
    received = []
    try:
        while True:
            answer = answers.get(timeout=WAIT_SECS)
            assert not isinstance(answer, InferenceServerException), answer
            if answer.get_response().parameters["triton_final_response"].bool_param:
                break
            received.append((answer.as_numpy("WORD").tolist(),
                             answer.as_numpy("LENGTH").tolist()))
    finally:
        client.stop_stream()
    assert received == [([b"QUIET"], [16]), ([b"WORDS"], [16]), ([b"HERE"], [16])]
    status, _, body = post(server, "/v2/models/shout_stream/generate_stream",
                           {"TEXT": "two words"})
    assert status == 200 and [e["WORD"] for e in events(body)] == ["TWO", "WORDS"]
    with pytest.raises(InferenceServerException, match="HTTP end point doesn't support models "
                                                       "with decoupled transaction policy"):
        http_text = httpclient.InferInput("TEXT", [1], "BYTES")
        http_text.set_data_from_numpy(np.array([b"x"], dtype=object))
        httpclient.InferenceServerClient(server.http_url).infer("shout_stream", [http_text])


# --------------------------------------------------------------- the generate extension


def post(server: ServerHandle, path: str, document: Any) -> tuple[int, str, bytes]:
    host, port = server.http_url.rsplit(":", 1)
    connection = http.client.HTTPConnection(host, int(port), timeout=WAIT_SECS)
    try:
        connection.request("POST", path, body=json.dumps(document),
                           headers={"Content-Type": "application/json"})
        response = connection.getresponse()
        return response.status, response.getheader("content-type", ""), response.read()
    finally:
        connection.close()


def events(body: bytes) -> list[dict[str, Any]]:
    """The ``data:`` events of a Server-Sent Events body."""
    chunks = body.decode("utf-8").split("\n\n")
    assert chunks[-1] == ""
    parsed = []
    for chunk in chunks[:-1]:
        assert chunk.startswith("data: "), chunk
        parsed.append(json.loads(chunk[len("data: "):]))
    return parsed


def test_generate_maps_json_to_tensors_and_back(server: ServerHandle) -> None:
    status, content_type, body = post(server, "/v2/models/add_sub/generate",
                                      {"id": "7", "INPUT0": [1, 2, 3, 4], "INPUT1": [1, 1, 1, 1],
                                       "parameters": {"temperature": 0.5}})
    assert (status, content_type) == (200, "application/json")
    assert json.loads(body) == {"id": "7", "model_name": "add_sub", "model_version": "1",
                                "OUTPUT0": [2.0, 3.0, 4.0, 5.0], "OUTPUT1": [0.0, 1.0, 2.0, 3.0]}
    status, _, body = post(server, "/v2/models/simple/versions/1/generate",
                           {"INPUT0": list(range(16)), "INPUT1": [1] * 16})
    assert status == 200 and json.loads(body)["OUTPUT0"] == list(range(1, 17))


def test_generate_needs_exactly_one_response(server: ServerHandle) -> None:
    status, _, body = post(server, "/v2/models/repeat/generate", {"IN": [4]})
    assert status == 200 and json.loads(body)["OUT"] == 4
    # Triton writes this error after a 200 status line; inferd's status says it too.
    for values in ([1, 2], []):
        status, _, body = post(server, "/v2/models/repeat/generate", {"IN": values})
        assert (status, json.loads(body)) == (500, {
            "error": "generate expects model to produce exactly 1 response, use generate "
                     "stream for model that generates various number of responses"})


def test_generate_passes_the_other_keys_as_request_parameters(server: ServerHandle) -> None:
    status, _, body = post(server, "/v2/models/echo_parameters/generate",
                           {"IN": 1, "top_k": 3, "id": "p",
                            "parameters": {"stream": False, "temperature": 0.5, "stop": "x"}})
    # A python model reads them as Triton's python backend gives them (one JSON object);
    # the response carries the model's outputs and no parameters of its own.
    assert (status, json.loads(body)) == (200, {
        "id": "p", "model_name": "echo_parameters", "model_version": "1",
        "PARAMETERS": '{"top_k":3,"stream":false,"temperature":0.5,"stop":"x"}'})
    status, _, body = post(server, "/v2/models/echo_parameters/generate", {"IN": 1, "bad": [1]})
    assert (status, json.loads(body)) == (400, {
        "error": "parameter 'bad' has invalid type. It should be either 'int', 'bool', or "
                 "'string'."})


def test_generate_stream_refuses_a_bad_request_before_the_stream(server: ServerHandle) -> None:
    for model, document in [("simple", {"INPUT0": list(range(16))}), ("repeat", {})]:
        status, content_type, body = post(server, f"/v2/models/{model}/generate_stream",
                                          document)
        assert (status, content_type) == (400, "application/json")
        assert "expected" in json.loads(body)["error"]
        assert "missing required input(s)" in json.loads(body)["error"]


def test_a_generate_body_that_is_not_json_says_so(server: ServerHandle) -> None:
    host, port = server.http_url.rsplit(":", 1)
    for path in ("generate", "generate_stream"):
        connection = http.client.HTTPConnection(host, int(port), timeout=WAIT_SECS)
        try:
            connection.request("POST", f"/v2/models/simple/{path}", body=b"{not json",
                               headers={"Content-Type": "application/json"})
            response = connection.getresponse()
            assert response.status == 400
            assert "invalid JSON" in json.loads(response.read())["error"]
        finally:
            connection.close()


def test_generate_refusals_are_json_errors_with_their_status(server: ServerHandle) -> None:
    status, _, body = post(server, "/v2/models/nope/generate_stream", {})
    assert status == 404 and "unknown model: 'nope'" in json.loads(body)["error"]
    status, _, body = post(server, "/v2/models/simple/generate", {"INPUT0": [1, 2, 3]})
    assert status == 400
    assert json.loads(body)["error"] == ("The schema can not convert input 'INPUT0' to tensor "
                                         "with proper shape")
    for not_an_object in ([1, 2], "text", None):
        status, _, body = post(server, "/v2/models/simple/generate", not_an_object)
        assert (status, json.loads(body)) == (
            400, {"error": "the generate request must be a JSON object"})


def test_generate_stream_sends_each_response_as_an_event(server: ServerHandle) -> None:
    status, content_type, body = post(server, "/v2/models/repeat/generate_stream",
                                      {"IN": [3, -4, 5], "id": "s"})
    assert (status, content_type) == (200, "text/event-stream; charset=utf-8")
    assert events(body) == [
        {"id": "s", "model_name": "repeat", "model_version": "1", "OUT": 3, "IDX": 0},
        {"error": "element 1 is negative: -4"},
        {"id": "s", "model_name": "repeat", "model_version": "1", "OUT": 5, "IDX": 2},
    ]
    status, _, body = post(server, "/v2/models/simple/generate_stream",
                           {"INPUT0": [2] * 16, "INPUT1": [1] * 16})
    assert status == 200 and [e["OUTPUT1"] for e in events(body)] == [[1] * 16]


def test_the_example_streaming_model_sends_one_word_at_a_time(server: ServerHandle) -> None:
    status, _, body = post(server, "/v2/models/stream_words/generate_stream",
                           {"text_input": "tokens arrive one by one"})
    assert status == 200
    assert [e["text_output"] for e in events(body)] == ["tokens", "arrive", "one", "by", "one"]
    assert_simple_serves(server)
