"""A bounded chaos run in the suite (issue 28): clients of every kind (HTTP, gRPC unary,
sequence and streaming, the native zmq client, system shared memory, and one that breaks its
own connections) on plain, batched, sequence, decoupled, ensemble and python models, while
the test SIGKILLs executors, reloads models, unloads and loads them and unregisters the
clients' shared memory regions (bench/mix_traffic.py and bench/mix_chaos.py, shared with
bench/chaos.py and bench/soak.py).

It asserts that no request waits past its deadline (a generous client timeout), that every
answer is right (against a reference computed here) or an error that is retryable (503) or
the client side's own doing, that no sequence sees another's state, that at the end every
model is READY and the server's and its executors' memory, descriptors, threads and
``/dev/shm`` segments are back near their start-up level (the slack below), and that the
server, run with ``TMPDIR`` set to a folder of the test's, leaves nothing there.

The run is seeded: the seed is printed, and ``INFERD_CHAOS_SEED`` replays one. The report
(requests by outcome, recovery times, the same clients' throughput before and after every
executor was killed at once) is printed; ``pytest -s`` shows it.
"""

from __future__ import annotations

import os
import random
import sys
import threading
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "bench"))

import mix_chaos  # noqa: E402
import mix_measure  # noqa: E402
import mix_traffic  # noqa: E402

DEADLINE_SECS = 30.0  # far past any normal answer: a request still waiting then is hung
PHASE_SECS = 8.0  # throughput windows before and after every executor is killed
CHAOS_SECS = 30.0
CHAOS_INTERVAL_SECS = 1.0
WARM_ANSWERS = 5  # right answers of every kind before anything is measured
# How far the end may be from the start-up level (taken with the clients connected, after
# the warm-up): a fresh executor and the allocator's high-water marks account for some.
RSS_SLACK = 64 << 20  # per process kind: the main process, the executors together
DESCRIPTOR_SLACK = 24
THREAD_SLACK = 8
SHM_SEGMENT_SLACK = 2
CLIENT_KINDS = ("HTTP", "gRPC unary", "gRPC sequence", "gRPC stream", "zmq", "shared memory")


def test_chaos(inferd: Any, tmp_path: Path) -> None:
    seed = int(os.environ.get("INFERD_CHAOS_SEED") or random.randrange(1 << 31))
    print(f"\nchaos seed {seed} (INFERD_CHAOS_SEED={seed} replays it)")
    rng = random.Random(seed)
    server_tmp = tmp_path / "server-tmp"
    server_tmp.mkdir()
    repository = mix_traffic.build_repository(tmp_path / "mix")
    server = inferd.start(repository, *mix_traffic.SERVER_FLAGS, env={"TMPDIR": str(server_tmp)})
    pid = server.process.pid
    target = mix_traffic.Target(server.http_url, server.grpc_url, server.url, DEADLINE_SECS)
    assert mix_chaos.wait_all_ready(target, 120), mix_chaos.not_ready(target)

    mix, tally = mix_chaos.start_mix(target, seed)
    chaos = mix_chaos.Chaos(pid, target, tally)
    try:
        _wait_answers(tally, server)
        start_up = mix_measure.footprint(pid)
        before = _phase(tally, "before")
        tally.phase = "chaos"
        stop = threading.Event()
        actions = threading.Thread(target=chaos.run, args=(rng, stop, CHAOS_INTERVAL_SECS),
                                   daemon=True)
        actions.start()
        stop.wait(CHAOS_SECS)
        stop.set()
        actions.join(DEADLINE_SECS * 4)
        assert not actions.is_alive(), "a chaos action never returned"
        mix_chaos.load_all(target)
        chaos.kill_all()
        after = _phase(tally, "after restart")
    finally:
        stuck = mix.finish()
    assert not stuck, f"client threads still waiting after the deadline: {stuck}"
    mix_chaos.load_all(target)
    assert mix_chaos.wait_all_ready(target, DEADLINE_SECS), mix_chaos.not_ready(target)
    end = _settled(pid, start_up)

    report = [f"chaos run, seed {seed}", *mix_measure.outcome_rows(tally), "",
              *mix_measure.recovery_rows(chaos), "",
              "| the same clients | right answers/s |", "|---|---:|",
              f"| before | {before:.0f} |", f"| after every executor was killed | {after:.0f} |",
              "", *mix_measure.footprint_rows(start_up, end), "", "errors by kind:"]
    report += [f"  {times} x {error}" for error, times in tally.errors.most_common(20)]
    print("\n".join(report))

    assert not tally.problems, "\n".join(tally.problems[:20])
    assert all(tally.counts[kind]["ok"] for kind in CLIENT_KINDS), tally.counts
    assert tally.counts["broken by the client"]["own doing"] > 0
    assert set(chaos.actions) == {"SIGKILL an executor", "SIGKILL every executor",
                                  "reload a model", "unload, then load a model",
                                  "unregister every shared memory region"}, chaos.actions
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


def _wait_answers(tally: mix_traffic.Tally, server: Any) -> None:
    """Until every kind of client has had right answers (bounded)."""
    kinds = CLIENT_KINDS
    limit = time.monotonic() + DEADLINE_SECS * 2
    while True:
        with tally.lock:
            waiting = {k for k in kinds if tally.counts.get(k, {}).get("ok", 0) < WARM_ANSWERS}
        if not waiting:
            return
        assert server.process.poll() is None, server.log()
        assert time.monotonic() < limit, f"no right answers yet from {waiting}: {tally.counts}"
        time.sleep(0.05)


def _phase(tally: mix_traffic.Tally, name: str) -> float:
    """Right answers per second of every client over ``PHASE_SECS``, without chaos."""
    tally.phase = name
    started = time.monotonic()
    time.sleep(PHASE_SECS)  # a measuring window, not a wait for an event
    seconds = time.monotonic() - started
    tally.phase = "end"
    return tally.ok_by_phase[name] / seconds


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
