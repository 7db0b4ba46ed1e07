"""A soak run: the chaos test's mix (``mix_traffic``, ``mix_chaos``) against a real
``inferd serve`` for ``--minutes N``, with a line of figures every minute: right answers per
second, their p99 latency, RSS and descriptors of every process of the server, /dev/shm
segments, and the minute's errors by kind. Not run in CI.

The chaos actions (an executor SIGKILLed, a model reloaded, unloaded and loaded, the shared
memory regions unregistered) come about once per ``--chaos-interval`` seconds (0: none, a
plain soak). The exit code is 1 if any request was wrong, hung or lost, a client never
returned, or the server did not exit 0 on SIGTERM.

    python -m bench.reliability.soak --minutes 10
"""

from __future__ import annotations

import argparse
import random
import sys
import threading
import time
from collections import Counter

from bench.common import serving
from bench.reliability import mix_chaos, mix_measure, mix_traffic

MIB = 1 << 20


def minute_line(minute: int, tally: mix_traffic.Tally, seconds: float, ok_before: int,
                errors_before: Counter[str], footprint: mix_measure.Footprint) -> str:
    totals = tally.totals()
    latencies = tally.take_latencies()
    processes = ", ".join(f"{name} {rss / MIB:.0f} MiB/{fds} fds"
                          for name, rss, fds in footprint.per_process)
    with tally.lock:
        errors = tally.errors - errors_before
    kinds: Counter[str] = Counter()
    for error, times in errors.items():
        kind, outcome = error.split(": ", 2)[:2]
        kinds[f"{kind} {outcome}"] += times
    shown = ", ".join(f"{times} {kind}" for kind, times in kinds.most_common()) or "none"
    return (f"minute {minute}: {(totals['ok'] - ok_before) / seconds:.0f} infer/s, "
            f"p99 {mix_measure.percentile(latencies, 0.99) * 1000:.1f} ms | {processes} | "
            f"{footprint.descriptors} fds, {footprint.threads} threads in all, "
            f"{footprint.shm_segments} shm segments | errors: {shown} | "
            f"wrong/hung/lost so far: {sum(totals[o] for o in mix_traffic.BAD)}")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--minutes", type=float, default=10.0)
    parser.add_argument("--chaos-interval", type=float, default=5.0,
                        help="mean seconds between chaos actions (default 5; 0: none)")
    parser.add_argument("--deadline", type=float, default=30.0)
    parser.add_argument("--seed", type=int, default=1)
    arguments = parser.parse_args()
    with serving.temporary_folder("inferd-soak-") as folder:
        repository = mix_traffic.build_repository(folder)
        server = serving.start(repository, *mix_traffic.SERVER_FLAGS, log=folder / "server.log")
        try:
            serving.wait_model_ready(server, mix_traffic.ENSEMBLE, via="http")
            target = mix_traffic.Target(server.address("http"), server.address("grpc"),
                                        server.zmq_url, arguments.deadline)
            if not mix_chaos.wait_all_ready(target, 120):
                raise TimeoutError(f"not READY: {mix_chaos.not_ready(target)}")
            pid = server.process.pid
            mix, tally = mix_chaos.start_mix(target, arguments.seed)
            chaos = mix_chaos.Chaos(pid, target, tally)
            stop = threading.Event()
            if arguments.chaos_interval > 0:
                threading.Thread(target=chaos.run, daemon=True, args=(
                    random.Random(arguments.seed), stop, arguments.chaos_interval)).start()
            start_up = mix_measure.footprint(pid)
            print(f"start: {start_up}", flush=True)
            minutes = max(1, round(arguments.minutes))
            for minute in range(1, minutes + 1):
                ok_before = tally.totals()["ok"]
                with tally.lock:
                    errors_before = Counter(tally.errors)
                started = time.monotonic()
                time.sleep(60.0)
                print(minute_line(minute, tally, time.monotonic() - started, ok_before,
                                  errors_before, mix_measure.footprint(pid)), flush=True)
            stop.set()
            stuck = mix.finish()
            mix_chaos.load_all(target)
            ready = mix_chaos.wait_all_ready(target, arguments.deadline)
            time.sleep(2.0)  # connections the clients closed go
            end = mix_measure.footprint(pid)
        finally:
            serving.stop_process(server.process, grace=30)
        print("\n".join(mix_measure.outcome_rows(tally)))
        print("\n".join(mix_measure.recovery_rows(chaos)))
        print("\n".join(mix_measure.footprint_rows(start_up, end)))
        for problem in tally.problems[:12]:
            print(f"PROBLEM {problem}")
        bad = sum(tally.totals()[o] for o in mix_traffic.BAD)
        code = server.process.returncode
        print(f"wrong + hung + lost = {bad}; clients stuck: {stuck}; every model READY: "
              f"{ready}; exit code on SIGTERM: {code}")
        return 0 if bad == 0 and not stuck and ready and code == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
