"""A bounded chaos run in the suite (issues 28 and 39), once per placement of the onnx models
(the server's own process, inferd's default, and ``--cpu-executor process``): clients of every
kind (HTTP, gRPC unary, sequence and streaming, the native zmq client, system shared memory,
and one that breaks its own connections) on plain, batched, sequence, decoupled, ensemble and
python models, while the test injects faults one after another: SIGKILL of an executor and of
every executor (under the default placement only the python models' processes exist), a model
reloaded, a model unloaded and loaded again (an onnx model, then another), every shared memory
region unregistered (bench/reliability/mix_traffic.py, mix_clients.py, mix_chaos.py and mix_faults.py,
shared with bench/reliability/chaos.py and bench/reliability/soak.py).

It asserts that no request waits past its deadline (a generous client timeout) and every
answer is right (against a reference computed here), that every failed request is tied to the
fault that caused it (``mix_faults``: it overlaps the fault, is on a model the fault touched
and says what the fault hit: the executor and pid killed, the model unloaded, the region
unregistered), that during each fault no request to a model it did not touch fails and some
are answered right, that a reload fails nothing but a stream in flight on an instance it
replaced, that after each fault every kind of client is answered right again and only a
client's stale state (a sequence or region from before the fault) fails once, that the right
answers per CPU-second after the faults are at least ``MIN_THROUGHPUT_RATIO`` of those
before, that no sequence sees another's state, that at the end every model is READY and the
server's and its executors' memory, descriptors, threads and ``/dev/shm`` segments are back
near their start-up level (the slack below), and that the server, run with ``TMPDIR`` set to
a folder of the test's, leaves nothing there.

Throughput is compared per CPU-second that the server, its executors and the clients were
given, not per second: the machine's other work (other tests run beside this one) moves
right answers per second by a factor of two within seconds, and a server that recovered into
extra work per request (an instance left on a thread, a busy loop) shows per CPU-second as
well.

The run is seeded: the seed is printed, and ``INFERD_CHAOS_SEED`` replays one. The report
(requests by outcome, each fault with the requests during and after it, failures by fault,
recovery times, throughput before and after) is printed; ``pytest -s`` shows it.
"""

from __future__ import annotations

import os
import random
import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from bench.reliability import mix_chaos, mix_faults, mix_measure, mix_traffic
from bench.reliability.mix_faults import Fault, Window

DEADLINE_SECS = 30.0  # far past any normal answer: a request still waiting then is hung
PHASE_SECS = 8.0  # throughput windows before and after the faults
MIN_THROUGHPUT_RATIO = 0.8  # after the faults, of before, in right answers per CPU-second
WARM_ANSWERS = 5  # right answers of every kind before anything is measured
UNLOAD_PAUSE_SECS = (0.2, 0.6)  # how long a model stays unloaded: clients meet it so
# Faults that last long enough (a restart, a load) for untouched models to be asked meanwhile.
LASTING = (mix_faults.KILL_ONE, mix_faults.UNLOAD)
# How far the end may be from the start-up level (taken with the clients connected, after
# the warm-up): a fresh executor and the allocator's high-water marks account for some.
RSS_SLACK = 64 << 20  # per process kind: the main process, the executors together
DESCRIPTOR_SLACK = 24
THREAD_SLACK = 8
SHM_SEGMENT_SLACK = 2
CLIENT_KINDS = ("HTTP", "gRPC unary", "gRPC sequence", "gRPC stream", "zmq", "shared memory")
STATEFUL_KINDS = ("gRPC sequence", "shared memory")  # their state may predate a fault


@pytest.mark.parametrize("placement", sorted(mix_traffic.PLACEMENTS))
def test_chaos(inferd: Any, tmp_path: Path, placement: str) -> None:
    seed = int(os.environ.get("INFERD_CHAOS_SEED") or random.randrange(1 << 31))
    print(f"\nchaos seed {seed} (INFERD_CHAOS_SEED={seed} replays it), placement {placement}")
    rng = random.Random(seed)
    server_tmp = tmp_path / "server-tmp"
    server_tmp.mkdir()
    repository = mix_traffic.build_repository(tmp_path / "mix")
    server = inferd.start(repository, *mix_traffic.server_flags(placement),
                          env={"TMPDIR": str(server_tmp)})
    pid = server.process.pid
    target = mix_traffic.Target(server.http_url, server.grpc_url, server.url, DEADLINE_SECS)
    assert mix_chaos.wait_all_ready(target, 120), mix_chaos.not_ready(target)

    mix, tally = mix_chaos.start_mix(target, seed)
    try:
        _wait_answers(tally, server, 0.0, WARM_ANSWERS)
        chaos = mix_chaos.Chaos(pid, target, tally, tuple(r.name for r in mix.regions))
        start_up = mix_measure.footprint(pid)
        before = mix_measure.measure(pid, tally, PHASE_SECS)
        for inject in _schedule(rng, chaos):
            fault = inject()
            assert fault is not None, f"nothing to fault: {chaos.actions}"
            assert fault.ended < float("inf"), (
                f"{fault.kind} ({fault.target}) never ended: {tally.problems[:8]}")
            _wait_answers(tally, server, fault.ended, 1)  # every kind of client served again
        after_faults = time.monotonic()
        _wait_answers(tally, server, after_faults, WARM_ANSWERS)  # as before the first window
        after = mix_measure.measure(pid, tally, PHASE_SECS)
    finally:
        stuck = mix.finish()
    assert not stuck, f"client threads still waiting after the deadline: {stuck}"
    mix_chaos.load_all(target)
    assert mix_chaos.wait_all_ready(target, DEADLINE_SECS), mix_chaos.not_ready(target)
    end = _settled(pid, start_up)

    calls = tally.calls_so_far()
    ends = [following.started for following in chaos.faults[1:]] + [after_faults]
    windows = [Window.of(fault, until, calls)
               for fault, until in zip(chaos.faults, ends, strict=True)]
    unexplained = [call for call in calls if call.outcome == "failed"
                   and mix_faults.explain(call, chaos.faults) is None]
    report = [f"chaos run, placement {placement}, seed {seed}",
              *mix_measure.outcome_rows(tally), "", *_fault_rows(windows), "",
              *_failure_rows(calls, chaos.faults), "", *mix_measure.recovery_rows(chaos), "",
              *_throughput_rows(before, after), "",
              *mix_measure.footprint_rows(start_up, end), "", "errors by kind:"]
    report += [f"  {times} x {error}" for error, times in tally.errors.most_common(12)]
    report += ["unexplained failures:"] + [f"  {call}" for call in unexplained[:12]]
    print("\n".join(report))

    assert not tally.problems, "\n".join(tally.problems[:20])
    assert not unexplained, "\n".join(map(str, unexplained[:20]))
    for window in windows:
        _check_window(window, mix)
    assert after.per_cpu_second >= MIN_THROUGHPUT_RATIO * before.per_cpu_second, report
    assert tally.counts["broken by the client"][mix_traffic.BROKEN] > 0
    assert set(chaos.actions) == set(mix_faults.KINDS), chaos.actions
    assert end.main_rss <= start_up.main_rss + RSS_SLACK, report
    assert end.executors == start_up.executors
    assert end.executors_rss <= start_up.executors_rss + RSS_SLACK, report
    assert end.descriptors <= start_up.descriptors + DESCRIPTOR_SLACK, report
    assert end.threads <= start_up.threads + THREAD_SLACK, report
    assert end.shm_segments <= start_up.shm_segments + SHM_SEGMENT_SLACK, report

    assert server.terminate() == 0, server.log()
    left = sorted(str(path.relative_to(server_tmp)) for path in server_tmp.rglob("*"))
    assert not left, f"the server left these in its TMPDIR: {left}"
    assert not list(mix_measure.SHM_DIR.glob(f"inferd-{pid}-*")), "segments left in /dev/shm"


def test_a_failure_is_explained_only_by_the_fault_that_it_names() -> None:
    """The classifier the run relies on (no server): a 503 is not enough, its words must
    name what the fault hit, on a model it touched, while it lasted."""
    killed = mix_faults.executors_killed(mix_faults.KILL_ONE, 10.0, [("executor/cpu0", 123)])
    killed.ended = 12.0
    unloaded = mix_faults.unloaded(20.0, "add_sub")
    unloaded.ended = 21.0
    unregistered = mix_faults.regions_unregistered(30.0, ["inferd_chaos_1"])
    unregistered.ended = 30.0
    faults = [killed, unloaded, unregistered]
    died = "executor process executor/cpu0 (pid 123) exited with code -9"

    def explained(model: str, code: str, message: str, started: float = 11.0,
                  since: float | None = None) -> str | None:
        call = mix_traffic.Call("HTTP", model, started if since is None else since, started,
                                started + 0.1, "failed", code, message)
        fault = mix_faults.explain(call, faults)
        return fault.kind if fault else None

    reloading = f"model 'simple' is being reloaded: {died}; retry the request"
    assert explained("simple", "UNAVAILABLE", reloading) == mix_faults.KILL_ONE
    assert explained("simple", "UNAVAILABLE", f"{died}; it is being restarted") == \
        mix_faults.KILL_ONE
    assert explained("add_then_identity", "UNAVAILABLE", "model 'add_then_identity' is not "
                     f"available: model 'identity_fp32' is being reloaded: {died}; retry the "
                     "request") == mix_faults.KILL_ONE
    # a retired version's step sent to the dead process's instance, refused by its successor
    stale = ("instance 528280977409 of 'simple' was loaded by executor process executor/cpu0 "
             "(pid 123), which exited; it is being restarted")
    assert explained("simple", "UNAVAILABLE", stale) == mix_faults.KILL_ONE
    assert explained("add_then_identity", "UNAVAILABLE", "in ensemble 'add_then_identity', "
                     "step 'identity_fp32' failed: "
                     f"{stale.replace('simple', 'identity_fp32')}") == mix_faults.KILL_ONE
    assert explained("simple", "UNAVAILABLE", stale.replace("123", "124")) is None
    assert explained("simple", "UNAVAILABLE", reloading.replace("123", "124")) is None
    assert explained("simple", "UNAVAILABLE", reloading, started=13.0) is None
    assert explained("simple", "NOT_FOUND", reloading) is None
    assert explained("simple", "UNAVAILABLE", "server is shutting down") is None
    assert explained("add_sub", "UNAVAILABLE",
                     reloading.replace("'simple'", "'add_sub'")) is None

    gone = "Request for unknown model: '{}' has no available versions"
    assert explained("add_sub", "NOT_FOUND", gone.format("add_sub"), 20.5) == mix_faults.UNLOAD
    assert explained("add_then_identity", "NOT_FOUND", gone.format("add_then_identity"),
                     20.5) == mix_faults.UNLOAD
    assert explained("simple", "NOT_FOUND", gone.format("simple"), 20.5) is None

    start = ("inference request for sequence 7 to model 'accumulate' must specify the START "
             "flag on the first request of the sequence")
    assert explained("accumulate", "INVALID_ARGUMENT", start, 12.5, since=9.0) == \
        mix_faults.KILL_ONE
    assert explained("accumulate", "INVALID_ARGUMENT", start, 12.5, since=12.2) is None

    region = "Unable to find system shared memory region: '{}'"
    assert explained("identity_fp32", "NOT_FOUND", region.format("inferd_chaos_1"), 30.5,
                     since=29.0) == mix_faults.UNREGISTER
    assert explained("identity_fp32", "NOT_FOUND", region.format("inferd_chaos_1"), 30.5,
                     since=30.2) is None
    assert explained("identity_fp32", "NOT_FOUND", region.format("other"), 30.5,
                     since=29.0) is None


def _schedule(rng: random.Random, chaos: mix_chaos.Chaos) -> list[Callable[[], Fault | None]]:
    """Every kind of fault, in a seeded order on seeded targets: reloads and unloads once on
    an onnx model (in the server's own process by default) and once on another."""
    onnx = mix_traffic.ONNX_MODELS
    others = (*mix_traffic.PYTHON_MODELS, mix_traffic.ENSEMBLE)
    faults: list[Callable[[], Fault | None]] = [
        lambda: chaos.kill_one(rng), chaos.kill_all, chaos.unregister_regions]
    for models in (onnx, others):
        reloaded, unloaded = rng.choice(models), rng.choice(models)
        faults.append(lambda model=reloaded: chaos.reload(model))  # type: ignore[misc]
        faults.append(lambda model=unloaded: chaos.unload_and_load(  # type: ignore[misc]
            model, rng.uniform(*UNLOAD_PAUSE_SECS)))
    rng.shuffle(faults)
    return faults


def _check_window(window: Window, mix: mix_chaos.Mix) -> None:
    """During a fault, requests to the models it touched fail at most as it may: a killed
    executor's models and an unloaded one until they are back (all of them); a reload serves
    the old version until the new one does, so only a stream in flight on the decoupled
    model's replaced instance (one per stream client); an unregistered region only its
    client's next request. Requests to the models it did not touch: none fail, and during a
    lasting fault some are answered right. After it, until the next, only a client whose
    sequence or region predates it fails, once."""
    fault = window.fault
    touched, untouched = window.during[True], window.during[False]
    name = f"{fault.kind} ({fault.target})"
    most = {mix_faults.RELOAD: mix.streams, mix_faults.UNREGISTER: mix.shared_memory}
    failed = [call for call in touched if call.outcome != "ok"]
    assert len(failed) <= most.get(fault.kind, len(touched)), (name, failed[:5])
    assert not [call for call in untouched if call.outcome != "ok"], (
        name, [call for call in untouched if call.outcome != "ok"][:5])
    if fault.kind in LASTING and not fault.touched >= frozenset(mix_traffic.MODELS):
        assert any(call.outcome == "ok" for call in untouched), (
            f"{name}: no model it did not touch was answered during it")
    stale = [call for call in window.after if call.outcome != "ok"]
    assert len(stale) <= mix.sequences + mix.shared_memory, (name, stale[:5])
    assert all(call.kind in STATEFUL_KINDS and call.since < fault.ended for call in stale), (
        name, stale[:5])


def _wait_answers(tally: mix_traffic.Tally, server: Any, since: float, answers: int) -> None:
    """Until every kind of client has had ``answers`` right answers to requests it sent after
    ``since`` (bounded)."""
    limit = time.monotonic() + DEADLINE_SECS * 2
    seen = 0
    right: Counter[str] = Counter()
    while True:
        calls = tally.calls_so_far()
        for call in calls[seen:]:
            if call.outcome == "ok" and call.started >= since:
                right[call.kind] += 1
        seen = len(calls)
        waiting = {kind for kind in CLIENT_KINDS if right[kind] < answers}
        if not waiting:
            return
        assert server.process.poll() is None, server.log()
        assert time.monotonic() < limit, f"no right answers yet from {waiting}: {tally.counts}"
        time.sleep(0.05)


def _settled(pid: int, start_up: mix_measure.Footprint) -> mix_measure.Footprint:
    """The footprint once descriptors and threads are back within their slack, or as it is
    after the deadline: closed connections and finished threads go a moment after the
    clients."""
    limit = time.monotonic() + DEADLINE_SECS
    while True:
        now = mix_measure.footprint(pid)
        settled = (now.descriptors <= start_up.descriptors + DESCRIPTOR_SLACK
                   and now.threads <= start_up.threads + THREAD_SLACK)
        if settled or time.monotonic() > limit:
            return now
        time.sleep(0.2)


def _fault_rows(windows: list[Window]) -> list[str]:
    rows = ["| fault | target | s | during, touched: calls (failed) | during, others | "
            "after, until the next: calls (failed) |", "|---|---|---:|---:|---:|---:|"]
    for window in windows:
        fault = window.fault
        cells = [f"{len(calls)} ({sum(c.outcome != 'ok' for c in calls)})"
                 for calls in (window.during[True], window.during[False], window.after)]
        rows.append(f"| {fault.kind} | {fault.target} | {fault.ended - fault.started:.2f} | "
                    + " | ".join(cells) + " |")
    return rows


def _failure_rows(calls: list[mix_traffic.Call], faults: list[Fault]) -> list[str]:
    """Failed requests by the fault that explains them and by kind of client."""
    by_fault: dict[str, Counter[str]] = {}
    for call in calls:
        if call.outcome == "failed":
            fault = mix_faults.explain(call, faults)
            by_fault.setdefault(fault.kind if fault else "unexplained", Counter())[call.kind] += 1
    rows = ["| failed requests, by fault | " + " | ".join(CLIENT_KINDS) + " |",
            "|---|" + "---:|" * len(CLIENT_KINDS)]
    for kind, counter in sorted(by_fault.items()):
        rows.append(f"| {kind} | " + " | ".join(str(counter[k]) for k in CLIENT_KINDS) + " |")
    return rows


def _throughput_rows(before: mix_measure.Throughput,
                     after: mix_measure.Throughput) -> list[str]:
    ratio = after.per_cpu_second / before.per_cpu_second if before.per_cpu_second else 0.0
    return ["| the same clients | right answers/s | their CPU-seconds/s (the machine's) | "
            "right answers per CPU-second |", "|---|---:|---:|---:|",
            *(f"| {name} | {t.per_second:.0f} | {t.cpu_seconds / t.seconds:.2f} "
              f"({t.machine_cpu_seconds / t.seconds:.2f}) | {t.per_cpu_second:.0f} |"
              for name, t in (("before the faults", before), ("after them", after))),
            f"after / before, per CPU-second: {ratio:.2f} (at least {MIN_THROUGHPUT_RATIO})"]
