"""Ensembles end to end through tritonclient http and grpc (SPEC 4): a four-step pipeline
whose two middle branches run in parallel, nested ensembles, composing models loaded with
the ensemble in EXPLICIT mode and unloaded with it, an ensemble that follows its composing
models' state, step failures, graph validation at load, reloads of a composing model under
traffic, and the per-step statistics. One EXPLICIT-mode server serves the module; the tests
change what is loaded, so they run in file order."""

from __future__ import annotations

import shutil
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
from tritonclient.utils import InferenceServerException

from tests.e2e.inferd_harness import wait_for

BRANCH_DELAY_MS = 300
RELOAD_CLIENTS = 4


def tensors(*specs: tuple[str, str, int]) -> str:
    return ", ".join(f'{{ name: "{n}" data_type: {t} dims: [ {d} ] }}' for n, t, d in specs)


def step(model: str, inputs: dict[str, str], outputs: dict[str, str], version: int = -1) -> str:
    def mapping(field: str, pairs: dict[str, str]) -> str:
        return f"{field} [ " + ", ".join(
            f'{{ key: "{k}" value: "{v}" }}' for k, v in pairs.items()) + " ]"

    return (f'{{ model_name: "{model}" model_version: {version} {mapping("input_map", inputs)} '
            f'{mapping("output_map", outputs)} }}')


def ensemble(name: str, inputs: str, outputs: str, *steps: str) -> str:
    return (f'name: "{name}"\nplatform: "ensemble"\nmax_batch_size: 8\n'
            f"input [ {inputs} ]\noutput [ {outputs} ]\n"
            f"ensemble_scheduling {{ step [ {', '.join(steps)} ] }}\n")


def composing_testing_model(name: str, mode: str, *, outputs: str, **parameters: str) -> str:
    lines = [f'name: "{name}"', 'backend: "inferd_testing"', "max_batch_size: 8",
             f"input [ {tensors(('INPUT0', 'TYPE_INT32', 16))} ]", f"output [ {outputs} ]",
             f'parameters {{ key: "mode" value {{ string_value: "{mode}" }} }}']
    lines += [f'parameters {{ key: "{k}" value {{ string_value: "{v}" }} }}'
              for k, v in parameters.items()]
    return "\n".join(lines) + "\n"


AB = tensors(("A", "TYPE_INT32", 16), ("B", "TYPE_INT32", 16))
SIMPLE_AB = {"INPUT0": "A", "INPUT1": "B"}


def branch(name: str) -> str:
    return composing_testing_model(
        name, "slow", delay_ms=str(BRANCH_DELAY_MS), times_output="TIMES",
        outputs=tensors(("OUTPUT0", "TYPE_INT32", 16), ("TIMES", "TYPE_INT64", 2)),
    )


CONFIGS = {
    "slow_x": branch("slow_x"),
    "slow_y": branch("slow_y"),
    "failing": composing_testing_model(
        "failing", "fail", outputs=tensors(("OUTPUT0", "TYPE_INT32", 16))),
    # simple -> (slow_x, slow_y in parallel) -> simple: OUT_SUM = 2A, OUT_DIFF = 2B.
    "pipeline": ensemble(
        "pipeline", AB,
        tensors(("OUT_SUM", "TYPE_INT32", 16), ("OUT_DIFF", "TYPE_INT32", 16),
                ("TIMES_X", "TYPE_INT64", 2), ("TIMES_Y", "TYPE_INT64", 2)),
        step("simple", SIMPLE_AB, {"OUTPUT0": "sum", "OUTPUT1": "diff"}),
        step("slow_x", {"INPUT0": "sum"}, {"OUTPUT0": "sum2", "TIMES": "TIMES_X"}),
        step("slow_y", {"INPUT0": "diff"}, {"OUTPUT0": "diff2", "TIMES": "TIMES_Y"}),
        step("simple", {"INPUT0": "sum2", "INPUT1": "diff2"},
             {"OUTPUT0": "OUT_SUM", "OUTPUT1": "OUT_DIFF"}),
    ),
    # simple -> simple: OUT_SUM = 2A, OUT_DIFF = 2B, fast.
    "chain": ensemble(
        "chain", AB, tensors(("OUT_SUM", "TYPE_INT32", 16), ("OUT_DIFF", "TYPE_INT32", 16)),
        step("simple", SIMPLE_AB, {"OUTPUT0": "sum", "OUTPUT1": "diff"}),
        step("simple", {"INPUT0": "sum", "INPUT1": "diff"},
             {"OUTPUT0": "OUT_SUM", "OUTPUT1": "OUT_DIFF"}),
    ),
    # chain (an ensemble) -> simple: SUM = 2A + 2B, DIFF = 2A - 2B.
    "nested": ensemble(
        "nested", AB, tensors(("SUM", "TYPE_INT32", 16), ("DIFF", "TYPE_INT32", 16)),
        step("chain", {"A": "A", "B": "B"}, {"OUT_SUM": "twice_a", "OUT_DIFF": "twice_b"}),
        step("simple", {"INPUT0": "twice_a", "INPUT1": "twice_b"},
             {"OUTPUT0": "SUM", "OUTPUT1": "DIFF"}),
    ),
    # simple -> slow_x: OUT = A + B after BRANCH_DELAY_MS.
    "via_x": ensemble(
        "via_x", AB, tensors(("OUT", "TYPE_INT32", 16)),
        step("simple", SIMPLE_AB, {"OUTPUT0": "sum", "OUTPUT1": "diff"}),
        step("slow_x", {"INPUT0": "sum"}, {"OUTPUT0": "OUT"}),
    ),
    "broken": ensemble(
        "broken", AB, tensors(("OUT", "TYPE_INT32", 16)),
        step("simple", SIMPLE_AB, {"OUTPUT0": "sum", "OUTPUT1": "diff"}),
        step("failing", {"INPUT0": "sum"}, {"OUTPUT0": "OUT"}),
    ),
    "unproduced": ensemble(
        "unproduced", AB, tensors(("OUT", "TYPE_INT32", 16)),
        step("simple", SIMPLE_AB, {"OUTPUT0": "sum", "OUTPUT1": "diff"}),
        step("simple", {"INPUT0": "sum", "INPUT1": "nowhere"}, {"OUTPUT0": "OUT"}),
    ),
    "wants_v7": ensemble(
        "wants_v7", AB, tensors(("OUT", "TYPE_INT32", 16)),
        step("simple", SIMPLE_AB, {"OUTPUT0": "OUT"}, version=7),
    ),
    "ghostly": ensemble(
        "ghostly", AB, tensors(("OUT", "TYPE_INT32", 16)),
        step("ghost", SIMPLE_AB, {"OUTPUT0": "OUT"}),
    ),
    "cycle_a": ensemble(
        "cycle_a", AB, tensors(("OUT_SUM", "TYPE_INT32", 16), ("OUT_DIFF", "TYPE_INT32", 16)),
        step("cycle_b", {"A": "A", "B": "B"}, {"OUT_SUM": "OUT_SUM", "OUT_DIFF": "OUT_DIFF"}),
    ),
    "cycle_b": ensemble(
        "cycle_b", AB, tensors(("OUT_SUM", "TYPE_INT32", 16), ("OUT_DIFF", "TYPE_INT32", 16)),
        step("cycle_a", {"A": "A", "B": "B"}, {"OUT_SUM": "OUT_SUM", "OUT_DIFF": "OUT_DIFF"}),
    ),
}


@pytest.fixture(scope="module")
def repository(module_inferd: Any) -> Path:
    root: Path = module_inferd.repository("simple", configs=CONFIGS)
    return root


@pytest.fixture(scope="module")
def server(module_inferd: Any, repository: Path) -> Any:
    return module_inferd.start(repository, "--model-control-mode", "explicit")


@pytest.fixture(scope="module")
def http(server: Any) -> Iterator[Any]:
    client = httpclient.InferenceServerClient(server.http_url, network_timeout=60)
    yield client
    client.close()


@pytest.fixture(scope="module")
def grpc(server: Any) -> Iterator[Any]:
    client = grpcclient.InferenceServerClient(server.grpc_url)
    yield client
    client.close()


def ab_inputs(module: Any, a: np.ndarray, b: np.ndarray) -> list[Any]:
    inputs = [module.InferInput("A", list(a.shape), "INT32"),
              module.InferInput("B", list(b.shape), "INT32")]
    inputs[0].set_data_from_numpy(a)
    inputs[1].set_data_from_numpy(b)
    return inputs


def sample(rows: int = 1, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    generator = np.random.default_rng(seed)
    shape = (rows, 16)
    return (generator.integers(-1000, 1000, shape, dtype=np.int32),
            generator.integers(-1000, 1000, shape, dtype=np.int32))


def states(http: Any, *names: str) -> dict[str, tuple[str, str]]:
    """model -> (state, reason) of its highest version in the index (or ("", "") if none)."""
    found: dict[str, tuple[str, str]] = {name: ("", "") for name in names}
    for entry in http.get_model_repository_index():
        if entry["name"] in found:
            found[entry["name"]] = (entry.get("state", ""), entry.get("reason", ""))
    return found


def refused(call: Callable[[], Any]) -> InferenceServerException:
    with pytest.raises(InferenceServerException) as error:
        call()
    return error.value


# ------------------------------------------------------------------------------- loading


def test_loading_an_ensemble_loads_its_composing_models(http: Any, grpc: Any) -> None:
    assert states(http, "simple", "chain", "nested") == {
        name: ("", "") for name in ("simple", "chain", "nested")
    }
    http.load_model("nested")  # nested -> chain -> simple
    assert states(http, "nested", "chain", "simple") == {
        name: ("READY", "") for name in ("nested", "chain", "simple")
    }
    grpc.load_model("pipeline")
    assert states(http, "pipeline", "slow_x", "slow_y") == {
        name: ("READY", "") for name in ("pipeline", "slow_x", "slow_y")
    }
    assert http.is_model_ready("pipeline") and grpc.is_model_ready("nested")
    assert http.get_model_metadata("pipeline")["platform"] == "ensemble"


# ------------------------------------------------------------------------------ inference


@pytest.mark.parametrize("module", [httpclient, grpcclient], ids=["http", "grpc"])
def test_the_pipeline_computes_its_outputs(module: Any, http: Any, grpc: Any) -> None:
    client = http if module is httpclient else grpc
    a, b = sample(rows=2)
    result = client.infer("pipeline", ab_inputs(module, a, b))
    np.testing.assert_array_equal(result.as_numpy("OUT_SUM"), 2 * a)
    np.testing.assert_array_equal(result.as_numpy("OUT_DIFF"), 2 * b)
    assert result.as_numpy("TIMES_X").shape == (2, 2)

    outputs = [module.InferRequestedOutput("DIFF")]
    only = client.infer("nested", ab_inputs(module, a, b), outputs=outputs)
    assert only.as_numpy("SUM") is None
    np.testing.assert_array_equal(only.as_numpy("DIFF"), 2 * a - 2 * b)


def test_a_request_that_does_not_fit_the_ensemble_is_refused(http: Any) -> None:
    a, _ = sample()
    inputs = [httpclient.InferInput("A", [1, 16], "INT32")]
    inputs[0].set_data_from_numpy(a)
    error = refused(lambda: http.infer("pipeline", inputs))
    assert error.status() == "400"
    assert "missing required input(s) ['B']" in error.message()
    assert "for model 'pipeline'" in error.message()


def test_parallel_branches_run_at_the_same_time(grpc: Any) -> None:
    a, b = sample()
    result = grpc.infer("pipeline", ab_inputs(grpcclient, a, b))
    x_start, x_end = result.as_numpy("TIMES_X")[0]
    y_start, y_end = result.as_numpy("TIMES_Y")[0]
    assert x_end - x_start >= BRANCH_DELAY_MS * 1_000_000
    # Each branch started before the other one ended: they overlapped.
    assert x_start < y_end and y_start < x_end, (x_start, x_end, y_start, y_end)


def test_statistics_break_the_ensemble_down_per_step(http: Any, grpc: Any) -> None:
    def snapshot() -> tuple[dict[str, Any], dict[str, Any]]:
        ensemble_stats = http.get_inference_statistics("pipeline")["model_stats"][0]
        simple_stats = http.get_inference_statistics("simple")["model_stats"][0]
        return ensemble_stats, simple_stats

    before, simple_before = snapshot()
    a, b = sample()
    for client, module in ((http, httpclient), (grpc, grpcclient)):
        client.infer("pipeline", ab_inputs(module, a, b))
    after, simple_after = snapshot()

    def delta(path: Callable[[dict[str, Any]], int]) -> int:
        return path(after) - path(before)

    assert delta(lambda s: s["inference_stats"]["success"]["count"]) == 2
    assert delta(lambda s: s["execution_count"]) == 2
    # The composing models count their own executions: simple runs twice per request.
    assert simple_after["execution_count"] - simple_before["execution_count"] == 4

    steps = {(s["step"], s["model"]): s for s in after["ensemble_steps"]}
    assert set(steps) == {(0, "simple"), (1, "slow_x"), (2, "slow_y"), (3, "simple")}
    earlier = {(s["step"], s["model"]): s for s in before["ensemble_steps"]}
    for key, stats in steps.items():
        assert stats["version"] == "1"
        assert stats["success"]["count"] - earlier[key]["success"]["count"] == 2
        assert stats["success"]["ns"] >= stats["compute_infer"]["ns"] > 0
    # The slow steps show where the time goes, without looking at their models.
    slow = steps[(1, "slow_x")]
    assert slow["compute_infer"]["ns"] >= slow["success"]["count"] * BRANCH_DELAY_MS * 1_000_000
    assert steps[(0, "simple")]["compute_infer"]["ns"] < slow["compute_infer"]["ns"]

    # tritonclient's gRPC conversion ignores the extra key; the standard fields come through.
    converted = grpc.get_inference_statistics("pipeline", as_json=True)["model_stats"][0]
    assert converted["name"] == "pipeline"
    assert int(converted["execution_count"]) == after["execution_count"]
    assert "ensemble_steps" not in converted


def test_a_failing_step_fails_the_request_naming_the_step(http: Any, grpc: Any) -> None:
    http.load_model("broken")
    a, b = sample()
    message = ("in ensemble 'broken', step 'failing' failed: "
               "testing backend: failure requested")
    error = refused(lambda: http.infer("broken", ab_inputs(httpclient, a, b)))
    assert (error.status(), error.message()) == ("400", message)
    error = refused(lambda: grpc.infer("broken", ab_inputs(grpcclient, a, b)))
    assert (error.status(), error.message()) == ("StatusCode.INVALID_ARGUMENT", message)
    stats = http.get_inference_statistics("broken")["model_stats"][0]
    assert stats["inference_stats"]["fail"]["count"] == 2
    http.unload_model("broken", unload_dependents=True)
    assert states(http, "broken", "failing", "simple") == {
        "broken": ("UNAVAILABLE", "unloaded"),
        "failing": ("UNAVAILABLE", "unloaded"),
        "simple": ("READY", ""),  # loaded before broken, and used by other ensembles
    }


# ----------------------------------------------------------------------- graph validation


def test_a_step_reading_an_unproduced_tensor_is_refused_at_load(http: Any, grpc: Any) -> None:
    message = ("ensemble 'unproduced': step 1 (model 'simple') reads tensor 'nowhere', which "
               "is neither an ensemble input nor written by any step")
    error = refused(lambda: http.load_model("unproduced"))
    assert error.status() == "400" and message in error.message()
    error = refused(lambda: grpc.load_model("unproduced"))
    assert error.status() == "StatusCode.INVALID_ARGUMENT" and message in error.message()
    assert states(http, "unproduced")["unproduced"][0] == "UNAVAILABLE"


def test_an_unknown_composing_model_is_refused_at_load(http: Any, grpc: Any) -> None:
    message = ("ensemble 'ghostly': step 0 (model 'ghost') uses model 'ghost', which is "
               "neither in the model repository nor loaded")
    for client in (http, grpc):
        error = refused(lambda client=client: client.load_model("ghostly"))
        assert message in error.message()
    state, reason = states(http, "ghostly")["ghostly"]
    assert state == "UNAVAILABLE" and message in reason


def test_a_step_naming_a_version_that_is_not_loaded_fails_the_load(http: Any) -> None:
    error = refused(lambda: http.load_model("wants_v7"))
    assert error.status() == "400"
    assert error.message() == ("failed to load 'wants_v7': ensemble 'wants_v7': composing "
                               "model 'simple' version 7 is not ready: not loaded")
    assert states(http, "simple")["simple"] == ("READY", "")


def test_a_cycle_of_ensembles_is_refused_at_load(http: Any) -> None:
    error = refused(lambda: http.load_model("cycle_a"))
    assert error.status() == "400"
    assert ("ensemble 'cycle_a': composing model 'cycle_b' failed to load: ensemble 'cycle_b': "
            "its composing models form a cycle: 'cycle_b' -> 'cycle_a' -> 'cycle_b'"
            ) in error.message()
    assert http.is_server_live()
    assert not http.is_model_ready("cycle_a") and not http.is_model_ready("cycle_b")


# ---------------------------------------------------------------- composing model state


def test_an_ensemble_follows_the_state_of_its_composing_models(http: Any, grpc: Any) -> None:
    a, b = sample()
    http.unload_model("slow_y")
    state, reason = states(http, "pipeline")["pipeline"]
    assert (state, reason) == ("UNAVAILABLE", "composing model 'slow_y' is not ready: unloaded")
    assert not http.is_model_ready("pipeline") and not grpc.is_model_ready("pipeline")
    error = refused(lambda: http.infer("pipeline", ab_inputs(httpclient, a, b)))
    # The answer names the ensemble, as Triton's does (the index says which step).
    assert (error.status(), error.message()) == (
        "404", "Request for unknown model: 'pipeline' has no available versions")
    error = refused(lambda: grpc.infer("pipeline", ab_inputs(grpcclient, a, b)))
    assert error.message() == "Request for unknown model: 'pipeline' has no available versions"

    grpc.load_model("slow_y")
    assert states(http, "pipeline")["pipeline"] == ("READY", "")
    assert http.is_model_ready("pipeline")
    result = http.infer("pipeline", ab_inputs(httpclient, a, b))
    np.testing.assert_array_equal(result.as_numpy("OUT_DIFF"), 2 * b)


def test_reloading_a_composing_model_under_traffic_fails_no_request(
    http: Any, server: Any, repository: Path
) -> None:
    stop = threading.Event()
    outcomes: list[str] = []
    spans: list[tuple[float, float]] = []  # each request's (start, end), to show it overlapped
    not_ready: list[str] = []

    def send(module: Any, url: str, seed: int) -> None:
        client = module.InferenceServerClient(url)
        a, b = sample(seed=seed)
        while not stop.is_set():
            start = time.monotonic()
            try:
                result = client.infer("chain", ab_inputs(module, a, b))
                good = np.array_equal(result.as_numpy("OUT_SUM"), 2 * a)
                outcomes.append("ok" if good else "wrong result")
            except InferenceServerException as error:
                outcomes.append(f"{error.status()}: {error.message()}")
            spans.append((start, time.monotonic()))

    def watch() -> None:
        client = httpclient.InferenceServerClient(server.http_url)
        while not stop.is_set():
            state = states(client, "chain")["chain"]
            if state != ("READY", "") or not client.is_model_ready("chain"):
                not_ready.append(repr(state))

    urls = [(httpclient, server.http_url), (grpcclient, server.grpc_url)]
    threads = [threading.Thread(target=send, args=(*urls[i % 2], i)) for i in range(RELOAD_CLIENTS)]
    threads.append(threading.Thread(target=watch))
    simple = repository / "simple"
    loads: list[tuple[float, float]] = []

    def load() -> None:
        start = time.monotonic()
        http.load_model("simple")
        loads.append((start, time.monotonic()))
        answered = len(spans)  # the clients go on past the load before the next change
        wait_for(lambda: len(spans) >= answered + RELOAD_CLIENTS, "requests after a load")

    for thread in threads:
        thread.start()
    try:
        wait_for(lambda: len(spans) >= RELOAD_CLIENTS, "the clients' first requests")
        shutil.copytree(simple / "1", simple / "2")
        load()  # a new version: 2 replaces 1
        config = simple / "config.pbtxt"
        config.write_text(config.read_text() + "dynamic_batching { }\n")
        load()  # a config change of version 2
        shutil.copytree(simple / "1", simple / "3")
        load()  # version 3 replaces 2
    finally:
        stop.set()
        for thread in threads:
            thread.join(timeout=30)
    failures = [outcome for outcome in outcomes if outcome != "ok"]
    assert not failures, f"{len(failures)} of {len(outcomes)} requests failed: {failures[:5]}"
    # Each load had requests in flight: started before it ended, answered after it began.
    overlapping = [sum(1 for start, end in spans if start < load_end and end > load_start)
                   for load_start, load_end in loads]
    assert all(overlapping), f"requests in flight during each load: {overlapping}"
    assert not not_ready, f"chain was not READY {len(not_ready)} times: {not_ready[:5]}"
    versions = [(e["version"], e["state"]) for e in http.get_model_repository_index()
                if e["name"] == "simple"]
    assert versions == [("1", "UNAVAILABLE"), ("2", "UNAVAILABLE"), ("3", "READY")]
    steps = http.get_inference_statistics("chain")["model_stats"][0]["ensemble_steps"]
    assert {s["version"] for s in steps} >= {"1", "3"}


# ------------------------------------------------------------------------------ unloading


def test_unload_dependents_unloads_what_only_the_ensemble_needed(http: Any, grpc: Any) -> None:
    http.unload_model("nested", unload_dependents=True)
    assert states(http, "nested", "chain", "simple") == {
        "nested": ("UNAVAILABLE", "unloaded"),
        "chain": ("UNAVAILABLE", "unloaded"),  # loaded only for nested
        "simple": ("READY", ""),  # loaded on request since, and used by pipeline
    }
    # slow_y was loaded again on request (above): it stays; slow_x goes with pipeline.
    grpc.unload_model("pipeline", unload_dependents=True)
    assert states(http, "pipeline", "slow_x", "slow_y", "simple") == {
        "pipeline": ("UNAVAILABLE", "unloaded"),
        "slow_x": ("UNAVAILABLE", "unloaded"),
        "slow_y": ("READY", ""),
        "simple": ("READY", ""),
    }
    error = refused(lambda: http.infer("pipeline", ab_inputs(httpclient, *sample())))
    assert error.message() == "Request for unknown model: 'pipeline' has no available versions"


def test_unload_dependents_takes_a_composing_model_an_earlier_ensemble_brought_in(
    http: Any, grpc: Any
) -> None:
    """Triton's cascading removal: every composing model no user asked for and no other
    loaded ensemble uses goes, whichever ensemble's load brought it in."""
    grpc.load_model("pipeline")  # slow_x comes in with it, implicitly
    http.unload_model("pipeline")  # without dependents: slow_x stays
    assert states(http, "pipeline", "slow_x") == {
        "pipeline": ("UNAVAILABLE", "unloaded"), "slow_x": ("READY", "")}
    http.load_model("via_x")  # finds slow_x READY
    a, b = sample()
    result = grpc.infer("via_x", ab_inputs(grpcclient, a, b))
    np.testing.assert_array_equal(result.as_numpy("OUT"), a + b)

    grpc.unload_model("via_x", unload_dependents=True)

    assert states(http, "via_x", "slow_x", "slow_y", "simple") == {
        "via_x": ("UNAVAILABLE", "unloaded"),
        "slow_x": ("UNAVAILABLE", "unloaded"),  # implicit, and nothing else uses it
        "slow_y": ("READY", ""),  # loaded on request
        "simple": ("READY", ""),  # loaded on request
    }


# ---------------------------------------------------------------------------- NONE mode


def test_at_start_up_ensembles_wait_for_their_composing_models(inferd: Any) -> None:
    """NONE mode loads every model at once: each ensemble ends READY if its composing models
    did, and UNAVAILABLE with the composing model's error if one failed."""
    configs = {name: CONFIGS[name] for name in ("chain", "nested", "slow_x", "slow_y",
                                                  "pipeline")}
    configs["doomed"] = composing_testing_model(
        "doomed", "fail_load", outputs=tensors(("OUTPUT0", "TYPE_INT32", 16)),
        message="no weights")
    configs["needs_doomed"] = ensemble(
        "needs_doomed", AB, tensors(("OUT", "TYPE_INT32", 16)),
        step("simple", SIMPLE_AB, {"OUTPUT0": "sum", "OUTPUT1": "diff"}),
        step("doomed", {"INPUT0": "sum"}, {"OUTPUT0": "OUT"}),
    )
    server = inferd.start(inferd.repository("simple", configs=configs), "--exit-on-error", "false")
    client = httpclient.InferenceServerClient(server.http_url)
    found = states(client, *configs, "simple")
    assert found.pop("doomed") == ("UNAVAILABLE", "no weights")
    assert found.pop("needs_doomed") == (
        "UNAVAILABLE", "composing model 'doomed' is not ready: no weights")
    assert found == {name: ("READY", "") for name in found}
    a, b = sample()
    result = client.infer("nested", ab_inputs(httpclient, a, b))
    np.testing.assert_array_equal(result.as_numpy("SUM"), 2 * a + 2 * b)
    error = refused(lambda: client.unload_model("chain"))
    assert error.status() == "503"
    client.close()
