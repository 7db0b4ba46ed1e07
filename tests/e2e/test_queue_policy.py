"""Triton's queue policies end to end, through tritonclient over HTTP and gRPC: a per-level
``max_queue_size`` refusing with Triton's message and request id, ``timeout_action`` REJECT
against DELAY (the order the model runs the requests in), ``allow_timeout_override``
(the request's ``timeout`` applies only when it is true; without dynamic batching it never
does), and ``preserve_ordering`` over two instances whose later requests finish first, for a
plain and for a decoupled model; the policies Triton refuses fail a load with its reasons,
the model loaded before serving on. A held model (the testing backend's ``release_file``) makes
the queues form: each request is sent once the one before it is in the server (its pending
count) and the first is let go only once the round is set. The python sleepers stamp each
response with the time they sent it, so the order is shown by cause (received after the other
was sent), never by how long anything took. Every wait is bounded."""

from __future__ import annotations

import json
import queue
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
from tritonclient.utils import InferenceServerException

from tests.e2e.inferd_harness import (
    InferdHarness,
    ServerHandle,
    pending,
    started_batches,
    wait_for,
)

WAIT_SECS = 30.0

SLOW = """
name: "{name}"
backend: "inferd_testing"
max_batch_size: 0
input [{{ name: "INPUT0" data_type: TYPE_FP32 dims: [ 4 ] }}]
output [{{ name: "OUTPUT0" data_type: TYPE_FP32 dims: [ 4 ] }}]
instance_group [{{ count: 1 kind: KIND_CPU }}]
parameters {{ key: "mode" value {{ string_value: "slow" }} }}
parameters {{ key: "delay_ms" value {{ string_value: "30000" }} }}
parameters {{ key: "release_file" value {{ string_value: "{folder}/{name}.release" }} }}
parameters {{ key: "started_file" value {{ string_value: "{folder}/{name}.started" }} }}
{batching}
"""

LEVELS = """dynamic_batching { priority_levels: 2 default_priority_level: 2
  default_queue_policy { max_queue_size: 1 }
  priority_queue_policy { key: 1 value { max_queue_size: 2 } } }"""
# A long default every request may shorten (allow_timeout_override), or not.
POLICIES = {
    "reject": "dynamic_batching { default_queue_policy { timeout_action: REJECT "
              "default_timeout_microseconds: 10000000 allow_timeout_override: true } }",
    "delay": "dynamic_batching { default_queue_policy { timeout_action: DELAY "
             "default_timeout_microseconds: 10000000 allow_timeout_override: true } }",
    "no_override": "dynamic_batching { default_queue_policy { timeout_action: REJECT "
                   "default_timeout_microseconds: 10000000 allow_timeout_override: false } }",
    "plain": "",  # no dynamic batching: no queue policy at all, as in Triton
}

SLEEPER_CONFIG = """
name: "{name}"
backend: "python"
max_batch_size: 0
input [ {{ name: "SECONDS" data_type: TYPE_FP32 dims: [ 1 ] }} ]
output [ {{ name: "OUT" data_type: TYPE_FP32 dims: [ 1 ] }},
         {{ name: "SENT_NS" data_type: TYPE_INT64 dims: [ 1 ] }} ]
instance_group [ {{ kind: KIND_CPU count: 2 }} ]
dynamic_batching {{ preserve_ordering: {ordered} }}
{decoupled}
"""
# Sleeps SECONDS, then answers them (one response; three, one per sleep, when decoupled),
# each response stamped with the time.time_ns() it was sent at (SENT_NS).
SLEEPER = """
import time

import numpy as np
import triton_python_backend_utils as pb_utils

DECOUPLED = {decoupled}


def sent():
    return pb_utils.Tensor("SENT_NS", np.array([time.time_ns()], np.int64))


class TritonPythonModel:
    def execute(self, requests):
        responses = []
        for request in requests:
            seconds = pb_utils.get_input_tensor_by_name(request, "SECONDS").as_numpy()
            if not DECOUPLED:
                time.sleep(float(seconds[0]))
                responses.append(pb_utils.InferenceResponse([pb_utils.Tensor("OUT", seconds),
                                                             sent()]))
                continue
            sender = request.get_response_sender()
            for index in range(3):
                time.sleep(float(seconds[0]))
                out = np.array([index], np.float32)
                sender.send(pb_utils.InferenceResponse([pb_utils.Tensor("OUT", out), sent()]))
            sender.send(flags=pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL)
        return None if DECOUPLED else responses
"""


def add_sleeper(root: Path, name: str, ordered: bool, decoupled: bool) -> None:
    folder = root / name
    (folder / "1").mkdir(parents=True)
    (folder / "config.pbtxt").write_text(SLEEPER_CONFIG.format(
        name=name, ordered=str(ordered).lower(),
        decoupled="model_transaction_policy { decoupled: true }" if decoupled else ""))
    (folder / "1" / "model.py").write_text(SLEEPER.format(decoupled=decoupled))


@pytest.fixture(scope="module")
def server(module_inferd: InferdHarness) -> ServerHandle:
    folder = module_inferd.folder
    configs = {name: SLOW.format(name=name, folder=folder, batching=batching)
               for name, batching in {"levels": LEVELS, **POLICIES}.items()}
    root = module_inferd.repository(configs=configs)
    for name, ordered, decoupled in (("ordered", True, False), ("unordered", False, False),
                                     ("ordered_stream", True, True),
                                     ("unordered_stream", False, True)):
        add_sleeper(root, name, ordered, decoupled)
    return module_inferd.start(root)


class Outcome:
    """What one request got, and when (monotonic seconds) it got it; for a sleeper, also
    when (time.time_ns()) it got it and when the model sent it."""

    def __init__(self) -> None:
        self.ok = False
        self.error = ""
        self.at = 0.0
        self.received_ns = 0
        self.sent_ns = 0


def send(protocol: str, server: ServerHandle, model: str, request_id: str, outcome: Outcome,
         timeout_us: int = 0, priority: int = 0) -> None:
    module: Any = httpclient if protocol == "http" else grpcclient
    url = server.http_url if protocol == "http" else server.grpc_url
    client = module.InferenceServerClient(url)
    tensor = module.InferInput("INPUT0", [4], "FP32")
    tensor.set_data_from_numpy(np.zeros(4, dtype=np.float32))
    try:
        client.infer(model, [tensor], request_id=request_id, priority=priority,
                     timeout=timeout_us or None)
        outcome.ok = True
    except InferenceServerException as error:
        outcome.error = f"{error.status()} {error.message()}"
    finally:
        outcome.at = time.monotonic()
        client.close()


class Round(dict[str, Outcome]):
    """Each request's outcome by name, and ``ran``: the request ids in the order the (held)
    model started them."""

    ran: list[str]


def run_in_order(server: ServerHandle, model: str,
                 calls: list[tuple[str, Callable[[Outcome], None]]],
                 before_release: Callable[[dict[str, Outcome]], None] | None = None,
                 held: bool = True) -> Round:
    """Start each call in its own thread once the one before it is in the server (queued or
    running: the model's pending count; or already answered), so they arrive in this order;
    then ``before_release``, then let a held model's first batch go, and wait (bounded) for
    all of them."""
    folder = server.log_path.parents[1]
    release, started = folder / f"{model}.release", folder / f"{model}.started"
    release.unlink(missing_ok=True)
    batches_before = len(started_batches(started))
    outcomes = Round()
    threads = []
    for number, (name, call) in enumerate(calls, 1):
        outcomes[name] = Outcome()
        threads.append(threading.Thread(target=call, args=(outcomes[name],)))
        threads[-1].start()
        wait_for(lambda n=number: pending(server, model) + sum(o.at > 0 for o in outcomes.values())
                 >= n, f"request {name} of {model} in the server", server)
    if before_release is not None:
        before_release(outcomes)
    if held:
        release.touch()
    for thread in threads:
        thread.join(timeout=WAIT_SECS)
    assert not any(thread.is_alive() for thread in threads), "a request never answered"
    outcomes.ran = started_batches(started)[batches_before:]
    return outcomes


UNAVAILABLE = {"http": "503", "grpc": "StatusCode.UNAVAILABLE"}


@pytest.mark.parametrize("protocol", ["http", "grpc"])
def test_each_priority_level_has_its_own_queue_size(server: ServerHandle, protocol: str) -> None:
    def call(request_id: str, priority: int) -> Callable[[Outcome], None]:
        return lambda outcome: send(protocol, server, "levels", request_id, outcome,
                                    priority=priority)

    # One request runs (under a queue policy nothing waits in a busy instance, as in
    # Triton); then level 2 (room for one) and level 1 (room for two) fill up, and one more
    # each is refused.
    outcomes = run_in_order(server, "levels", [
        ("running", call("running", 2)),
        ("low", call("low", 2)), ("low-over", call("low-over", 0)),  # 0: the default level
        ("high", call("high", 1)), ("high2", call("high2", 1)), ("high-over", call("high-over", 1)),
    ])
    status = UNAVAILABLE[protocol]
    assert outcomes["low-over"].error == \
        f"{status} [request id: low-over] Exceeds maximum queue size"
    assert outcomes["high-over"].error == \
        f"{status} [request id: high-over] Exceeds maximum queue size"
    # Refused at the door, long before the queue they found full moved.
    assert outcomes["high-over"].at < outcomes["running"].at
    assert outcomes.ran == ["running", "high", "high2", "low"]


SHORT_TIMEOUT_SECS = 0.1


def timeout_round(protocol: str, server: ServerHandle, model: str) -> Round:
    """``running`` occupies the instance (held) and ``next`` waits; ``short`` queues with a
    100 ms timeout of its own, and ``long`` behind it (its timeout is the 10 s default).
    ``running`` is let go once ``short`` was refused (REJECT answers it when its timeout
    expires: that answer is the event waited for), or where nothing answers it, once its
    timeout has passed five times over: time that must pass for the server, which reads this
    clock, to find it expired; never a bound on how soon the server does anything."""
    def call(request_id: str, timeout_us: int = 0) -> Callable[[Outcome], None]:
        return lambda outcome: send(protocol, server, model, request_id, outcome,
                                    timeout_us=timeout_us)

    def expired(outcomes: dict[str, Outcome]) -> None:
        if model == "reject":
            wait_for(lambda: outcomes["short"].at, "short's refusal", server)
        else:
            time.sleep(5 * SHORT_TIMEOUT_SECS)

    return run_in_order(server, model, [
        ("running", call("running")), ("next", call("next")),
        ("short", call("short", timeout_us=int(SHORT_TIMEOUT_SECS * 1e6))),
        ("long", call("long"))], expired)


@pytest.mark.parametrize("protocol", ["http", "grpc"])
def test_reject_fails_a_request_whose_timeout_expires_in_the_queue(
        server: ServerHandle, protocol: str) -> None:
    outcomes = timeout_round(protocol, server, "reject")
    assert outcomes["short"].error == f"{UNAVAILABLE[protocol]} Request timeout expired"
    # It is answered when its timeout expires, not when an instance gets to it.
    assert outcomes["short"].at < outcomes["running"].at
    assert outcomes.ran == ["running", "next", "long"]


@pytest.mark.parametrize("protocol", ["http", "grpc"])
def test_delay_keeps_a_timed_out_request_but_behind_the_live_ones(
        server: ServerHandle, protocol: str) -> None:
    outcomes = timeout_round(protocol, server, "delay")
    assert all(o.ok for o in outcomes.values()), {n: o.error for n, o in outcomes.items()}
    assert outcomes.ran == ["running", "next", "long", "short"]


@pytest.mark.parametrize("model", ["no_override", "plain"])
def test_the_request_timeout_is_ignored_unless_the_policy_allows_overriding(
        server: ServerHandle, model: str) -> None:
    outcomes = timeout_round("http", server, model)
    assert all(o.ok for o in outcomes.values()), {n: o.error for n, o in outcomes.items()}
    assert outcomes.ran == ["running", "next", "short", "long"]


def sleep_for(protocol: str, server: ServerHandle, model: str, seconds: float,
              outcome: Outcome) -> None:
    module: Any = httpclient if protocol == "http" else grpcclient
    url = server.http_url if protocol == "http" else server.grpc_url
    client = module.InferenceServerClient(url)
    tensor = module.InferInput("SECONDS", [1], "FP32")
    tensor.set_data_from_numpy(np.array([seconds], np.float32))
    try:
        result = client.infer(model, [tensor])
        outcome.received_ns = time.time_ns()
        outcome.sent_ns = int(result.as_numpy("SENT_NS")[0])
        outcome.ok = True
    except InferenceServerException as error:
        outcome.error = f"{error.status()} {error.message()}"
    finally:
        outcome.at = time.monotonic()
        client.close()


@pytest.mark.parametrize("protocol", ["http", "grpc"])
def test_preserve_ordering_holds_a_later_response_until_the_earlier_one_is_sent(
        server: ServerHandle, protocol: str) -> None:
    def quick_before_slow_was_sent(model: str) -> bool:
        """Whether the quick second request was answered before the slow first one was sent
        (two instances: they run at once)."""
        outcomes = run_in_order(server, model, [
            ("slow", lambda o: sleep_for(protocol, server, model, 1.0, o)),
            ("quick", lambda o: sleep_for(protocol, server, model, 0.05, o)),
        ], held=False)
        assert all(o.ok for o in outcomes.values()), {n: o.error for n, o in outcomes.items()}
        return outcomes["quick"].received_ns < outcomes["slow"].sent_ns

    assert quick_before_slow_was_sent("unordered")  # the difference is visible without it
    assert not quick_before_slow_was_sent("ordered")  # held until the slow one is sent


def streamed_times(server: ServerHandle, model: str) -> dict[tuple[str, int], tuple[int, int]]:
    """When (time.time_ns()) each (request id, response index) reached the client and when
    the model sent it, for a slow request (3 responses 0.3 s apart) sent before a quick one
    (3, 0.02 s apart) once the slow one is in the server, each on a gRPC stream of its own
    (inferd writes one stream's responses in its requests' order, so one stream would not show
    the model's order)."""
    received: queue.Queue[tuple[str, int, int, int] | str] = queue.Queue()

    def callback(result: Any, error: InferenceServerException | None) -> None:
        if error is not None:
            received.put(str(error))
            return
        response = result.get_response()
        if response.outputs:
            received.put((response.id, int(result.as_numpy("OUT")[0]), time.time_ns(),
                          int(result.as_numpy("SENT_NS")[0])))

    clients = []
    try:
        for request_id, seconds in (("slow", 0.3), ("quick", 0.02)):
            client = grpcclient.InferenceServerClient(server.grpc_url)
            clients.append(client)
            client.start_stream(callback=callback)
            tensor = grpcclient.InferInput("SECONDS", [1], "FP32")
            tensor.set_data_from_numpy(np.array([seconds], np.float32))
            client.async_stream_infer(model, [tensor], request_id=request_id)
            wait_for(lambda: pending(server, model) >= len(clients) or not received.empty(),
                     f"{request_id} in the server", server)
        times: dict[tuple[str, int], tuple[int, int]] = {}
        deadline = time.monotonic() + WAIT_SECS
        while len(times) < 6:
            item = received.get(timeout=max(0.1, deadline - time.monotonic()))
            assert isinstance(item, tuple), item
            times[item[0], item[1]] = item[2], item[3]
        return times
    finally:
        for client in clients:
            client.stop_stream()
            client.close()


def test_preserve_ordering_on_a_decoupled_model_streams_requests_one_after_another(
        server: ServerHandle) -> None:
    # Each entry: (received, sent) in time.time_ns().
    unordered = streamed_times(server, "unordered_stream")
    assert unordered["quick", 2][0] < unordered["slow", 2][1], unordered  # quick ends first
    # As in Triton: the first request streams as it goes (each response reaches the client
    # before the model sends the next), the next one's responses wait until the first has
    # sent its final one.
    ordered = streamed_times(server, "ordered_stream")
    assert ordered["slow", 0][0] < ordered["slow", 1][1], ordered
    assert ordered["slow", 1][0] < ordered["slow", 2][1], ordered
    assert min(ordered["quick", n][0] for n in range(3)) >= ordered["slow", 2][1], ordered


# ------------------------------------------------------------------ refused at load

REFUSED_POLICIES = [
    ({"priority_levels": 2, "default_priority_level": 3},
     "default priority level must be in range [1, 2] for levels"),
    ({"priority_levels": 2, "default_priority_level": 1,
      "priority_queue_policy": {"3": {"max_queue_size": 1}}},
     "priority queue policy must have priority level in range [1, 2] for levels"),
    ({"priority_levels": 2, "default_priority_level": 1, "preserve_ordering": True},
     "Only one priority level is allowed when 'preserve_ordering' is true for levels"),
    ({"default_queue_policy": {"timeout_action": 7}},
     "model 'levels': unknown timeout_action 7 in dynamic_batching.default_queue_policy "
     "(REJECT or DELAY)"),
]


def test_queue_policies_triton_refuses_fail_the_load_and_leave_the_model_serving(
        inferd: InferdHarness) -> None:
    """Triton's reasons, as a client error (400 / INVALID_ARGUMENT) naming them; the version
    loaded before keeps serving with its own config."""
    (inferd.folder / "levels.release").touch()  # never held: its requests run at once
    root = inferd.repository(configs={"levels": SLOW.format(name="levels", folder=inferd.folder,
                                                             batching=LEVELS)})
    server = inferd.start(root, "--model-control-mode", "explicit", "--load-model", "levels")
    http = httpclient.InferenceServerClient(server.http_url)
    grpc = grpcclient.InferenceServerClient(server.grpc_url)
    base = http.get_model_config("levels")
    for batching, reason in REFUSED_POLICIES:
        override = json.dumps({**{k: v for k, v in base.items() if k != "dynamic_batching"},
                               "dynamic_batching": batching})
        for client, status in ((http, "400"), (grpc, "StatusCode.INVALID_ARGUMENT")):
            with pytest.raises(InferenceServerException) as refused:
                client.load_model("levels", config=override)
            assert refused.value.status() == status
            assert refused.value.message() == f"failed to load 'levels': {reason}"
    assert http.is_model_ready("levels") and grpc.is_model_ready("levels")
    assert http.get_model_config("levels") == base
    outcome = Outcome()
    send("grpc", server, "levels", "after", outcome, priority=1)
    assert outcome.ok, outcome.error
