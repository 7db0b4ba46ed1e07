"""The chaos mix run against a real server: the client threads of ``mix_traffic``, the chaos
actions.

Owns ``Mix`` (a thread per client, each looping on its kind of request and recording every
request until told to stop), ``Chaos`` (SIGKILL an executor, reload a model, unload and load
one again, unregister every shared memory region, kill every executor at once; each action
kept as a ``mix_faults.Fault`` that lasts until every model is READY again, a killed
executor's until the pool has started it again first). What a fault explains is
``mix_faults``'; what is measured of the server and the report's tables are
``mix_measure``'s. It starts no server.
"""

from __future__ import annotations

import os
import random
import signal
import threading
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import partial
from typing import Any

import psutil
import requests
import tritonclient.grpc as grpcclient
from tritonclient.utils import InferenceServerException

from bench.reliability import mix_clients, mix_faults, mix_traffic
from bench.reliability.mix_faults import Fault
from bench.reliability.mix_measure import executors
from bench.reliability.mix_traffic import Call, Tally, Target, Wrong
from inferd.protocols.client import Client as NativeClient
from inferd.protocols.errors import InferdError

# ---------------------------------------------------------------- client threads

RETRY_AFTER_SECS = 0.05  # as a client told to retry does, rather than at once


def _guarded(kind: str, model: str, tally: Tally, once: Callable[[], mix_traffic.Outcome],
             since: Callable[[], float] | None = None,
             on_lost: Callable[[], None] = lambda: None) -> None:
    """One request to ``model`` through ``once``, recorded whatever happens; ``since`` says
    since when the client's state (a sequence, a stream, a region) has been what it is."""
    started = time.monotonic()
    code = ""
    try:
        outcome, code, detail = once()
    except Wrong as error:
        outcome, detail = "wrong", str(error)
    except requests.Timeout as error:
        outcome, detail = "hung", str(error)
    except requests.RequestException as error:
        outcome, detail = "lost", str(error)
        on_lost()
    except InferenceServerException as error:
        if error.status() is None:  # tritonclient.http: the connection broke
            outcome, detail = "lost", str(error)
            on_lost()
        elif str(error.status()).startswith("StatusCode."):
            outcome, code, detail = mix_traffic.grpc_error(error)
        else:
            outcome, code, detail = mix_traffic.http_error(int(error.status()),
                                                           error.message() or "")
    except InferdError as error:
        outcome, code, detail = mix_traffic.native_error(error)
    ended = time.monotonic()
    tally.record(Call(kind, model, min(started, since()) if since else started, started, ended,
                      outcome, code, detail))
    if outcome == "failed":
        time.sleep(RETRY_AFTER_SECS)


@dataclass
class Mix:
    """The client threads: how many of each kind, started together, stopped together."""

    target: Target
    tally: Tally
    seed: int
    http: int = 2
    grpc: int = 1
    sequences: int = 2  # two at once, so a state mixed between them shows as a wrong sum
    streams: int = 1
    native: int = 1
    shared_memory: int = 1
    breakers: int = 1
    stop: threading.Event = field(default_factory=threading.Event)
    threads: list[threading.Thread] = field(default_factory=list)
    regions: list[mix_clients.SharedMemoryClient] = field(default_factory=list)

    def start(self) -> None:
        loops: list[Callable[[random.Random], None]] = []
        loops += [self._http] * self.http + [self._grpc] * self.grpc
        loops += [self._sequence] * self.sequences + [self._stream] * self.streams
        loops += [self._native] * self.native + [self._shared_memory] * self.shared_memory
        loops += [self._breaker] * self.breakers
        for index, loop in enumerate(loops):
            rng = random.Random(self.seed * 1000 + index)
            thread = threading.Thread(target=loop, args=(rng,), daemon=True,
                                      name=f"{loop.__name__}-{index}")
            self.threads.append(thread)
            thread.start()

    def finish(self) -> list[str]:
        """Stop every client; the names of those that did not return within the deadline."""
        self.stop.set()
        stuck = []
        for thread in self.threads:
            thread.join(self.target.deadline * 2)
            if thread.is_alive():
                stuck.append(thread.name)
        for region in self.regions:
            region.close()
        return stuck

    def _http(self, rng: random.Random) -> None:
        session = requests.Session()

        def fresh() -> None:
            nonlocal session
            session = requests.Session()

        while not self.stop.is_set():
            model = rng.choice(mix_traffic.STATELESS)
            _guarded("HTTP", model, self.tally,
                     partial(mix_traffic.http_once, session, self.target, model, rng),
                     on_lost=fresh)

    def _grpc(self, rng: random.Random) -> None:
        with grpcclient.InferenceServerClient(self.target.grpc) as client:
            while not self.stop.is_set():
                model = rng.choice(mix_traffic.STATELESS)
                _guarded("gRPC unary", model, self.tally,
                         partial(mix_traffic.grpc_once, client, self.target, model, rng))

    def _sequence(self, rng: random.Random) -> None:
        sequences = mix_clients.Sequences(rng.randint(1, 1 << 40), rng)
        with grpcclient.InferenceServerClient(self.target.grpc) as client:
            while not self.stop.is_set():
                _guarded("gRPC sequence", mix_traffic.SEQUENCE, self.tally,
                         lambda: sequences.once(client, self.target), lambda: sequences.since)

    def _stream(self, rng: random.Random) -> None:
        stream = mix_clients.Stream(self.target)
        try:
            while not self.stop.is_set():
                _guarded("gRPC stream", mix_traffic.DECOUPLED, self.tally,
                         lambda: stream.once(rng), lambda: stream.since)
        finally:
            stream.close()

    def _native(self, rng: random.Random) -> None:
        with NativeClient(self.target.zmq, timeout=self.target.deadline) as client:
            while not self.stop.is_set():
                model = rng.choice(mix_traffic.STATELESS)
                _guarded("zmq", model, self.tally,
                         partial(mix_traffic.native_once, client, model, rng))

    def _shared_memory(self, rng: random.Random) -> None:
        key = f"/inferd_chaos_{os.getpid()}_{rng.randrange(1 << 30)}"
        region = mix_clients.SharedMemoryClient(self.target, key)
        self.regions.append(region)
        while not self.stop.is_set():
            _guarded("shared memory", mix_traffic.SHARED_MEMORY_MODEL, self.tally,
                     lambda: region.once(rng), lambda: region.since)

    def _breaker(self, rng: random.Random) -> None:
        with grpcclient.InferenceServerClient(self.target.grpc) as client:
            while not self.stop.wait(rng.uniform(0.01, 0.1)):
                try:
                    if rng.random() < 0.5:
                        mix_clients.break_http(self.target, rng)
                    else:
                        mix_clients.break_grpc(client, rng)
                    self.tally.add("broken by the client", mix_traffic.BROKEN)
                except OSError as error:
                    self.tally.add("broken by the client", "lost", str(error))


# ---------------------------------------------------------------- chaos


@dataclass
class Chaos:
    """The chaos actions on one server, each kept as a ``Fault`` (``mix_faults``: what it
    hit, from when until every model was READY again), with how long the server took to
    have every model READY again after it. ``regions`` are the clients' shared memory
    regions, whose requests an unregister fails."""

    server_pid: int
    target: Target
    tally: Tally
    regions: tuple[str, ...] = ()
    actions: Counter[str] = field(default_factory=Counter)
    recoveries: dict[str, list[float]] = field(default_factory=dict)
    killed: set[int] = field(default_factory=set)
    faults: list[Fault] = field(default_factory=list)

    def kill(self, victims: list[psutil.Process], what: str) -> Fault | None:
        named = [(name, victim) for victim in victims
                 if (name := executor_name(victim)) is not None]
        if not named:
            return None
        started = time.monotonic()
        fault = mix_faults.executors_killed(what, started, [(name, victim.pid)
                                                            for name, victim in named])
        self.faults.append(fault)
        for _, victim in named:
            try:
                self.killed.add(victim.pid)
                os.kill(victim.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        self.actions[what] += 1
        for _, victim in named:
            try:
                victim.wait(self.target.deadline)
            except psutil.Error:
                pass
        # The models were READY a moment ago: the fault lasts at least until the pool has
        # started each victim again (it notes the death first), then until all are READY.
        if self._restarted(named):
            self._recovered(fault)
        return fault

    def _restarted(self, victims: list[tuple[str, psutil.Process]]) -> bool:
        limit = time.monotonic() + self.target.deadline
        old = {victim.pid for _, victim in victims}
        while True:
            running = {executor_name(p): p.pid for p in executors(self.server_pid)}
            if all(running.get(name, 0) not in (0, *old) for name, _ in victims):
                return True
            if time.monotonic() > limit:
                self.tally.add("control", "hung", f"not restarted within "
                               f"{self.target.deadline} s: {[name for name, _ in victims]}")
                return False
            time.sleep(0.05)

    def kill_one(self, rng: random.Random) -> Fault | None:
        found = sorted(executors(self.server_pid), key=lambda p: executor_name(p) or "")
        return self.kill([rng.choice(found)] if found else [], mix_faults.KILL_ONE)

    def kill_all(self) -> Fault | None:
        return self.kill(executors(self.server_pid), mix_faults.KILL_ALL)

    def control(self, action: str, model: str) -> bool:
        try:
            response = requests.post(f"{self.target.base}/v2/repository/models/{model}/"
                                     f"{action}", timeout=(5, self.target.deadline * 2))
        except requests.Timeout as error:
            self.tally.add("control", "hung", f"{action} {model}: {error}")
            return False
        except requests.RequestException as error:
            self.tally.add("control", "lost", f"{action} {model}: {error}")
            return False
        ok = response.status_code == 200
        self.tally.add("control", "ok" if ok else "wrong", f"{action} {model}: "
                       f"{response.status_code} {mix_traffic.error_of(response)}")
        return ok

    def reload(self, model: str) -> Fault:
        fault = mix_faults.reloaded(time.monotonic(), model)
        self.faults.append(fault)
        self.actions[mix_faults.RELOAD] += 1
        if self.control("load", model):
            self._recovered(fault)
        return fault

    def unload_and_load(self, model: str, pause: float) -> Fault:
        fault = mix_faults.unloaded(time.monotonic(), model)
        self.faults.append(fault)
        self.actions[mix_faults.UNLOAD] += 1
        self.control("unload", model)
        time.sleep(pause)  # clients meet the model unloaded meanwhile
        if self.control("load", model):
            self._recovered(fault)
        return fault

    def unregister_regions(self) -> Fault | None:
        fault = mix_faults.regions_unregistered(time.monotonic(), self.regions)
        self.faults.append(fault)
        try:
            requests.post(f"{self.target.base}/v2/systemsharedmemory/unregister",
                          timeout=(5, self.target.deadline))
            self.actions[mix_faults.UNREGISTER] += 1
            fault.ended = time.monotonic()
        except requests.RequestException as error:
            self.tally.add("control", "lost", f"unregister regions: {error}")
        return fault

    def run(self, rng: random.Random, stop: threading.Event, interval: float) -> None:
        """Actions until ``stop``, about one per ``interval`` seconds: rounds of each kind
        once, in a random order, on random models."""
        kinds = ["kill", "reload", "unload", "regions"]
        while not stop.is_set():
            rng.shuffle(kinds)
            for kind in kinds:
                if stop.wait(rng.uniform(interval / 2, interval * 1.5)):
                    return
                model = rng.choice(mix_traffic.MODELS)
                if kind == "kill":
                    self.kill_one(rng)
                elif kind == "reload":
                    self.reload(model)
                elif kind == "unload":
                    self.unload_and_load(model, rng.uniform(0.1, 1.0))
                else:
                    self.unregister_regions()

    def unexplained(self) -> list[Call]:
        """The failed requests no fault of this run explains."""
        return [call for call in self.tally.calls_so_far()
                if call.outcome == "failed" and mix_faults.explain(call, self.faults) is None]

    def _recovered(self, fault: Fault) -> None:
        """Wait (bounded) until every model is READY; the fault ends then."""
        if wait_all_ready(self.target, self.target.deadline):
            fault.ended = time.monotonic()
            self.recoveries.setdefault(fault.kind, []).append(fault.ended - fault.started)
        else:
            self.tally.add("control", "hung", f"after {fault.kind}: not every model READY "
                           f"within {self.target.deadline} s")


def executor_name(process: psutil.Process) -> str | None:
    """The ``--name`` an executor process was started with (None once it is gone)."""
    try:
        arguments = process.cmdline()
        return arguments[arguments.index("--name") + 1]
    except (psutil.Error, ValueError, IndexError):
        return None


def not_ready(target: Target) -> list[str]:
    waiting = []
    for model in mix_traffic.MODELS:
        try:
            if requests.get(f"{target.base}/v2/models/{model}/ready",
                            timeout=(5, target.deadline)).status_code != 200:
                waiting.append(model)
        except requests.RequestException:
            waiting.append(model)
    return waiting


def wait_all_ready(target: Target, within: float) -> bool:
    limit = time.monotonic() + within
    while not_ready(target):
        if time.monotonic() > limit:
            return False
        time.sleep(0.05)
    return True


def load_all(target: Target) -> None:
    """Every model loaded (an unload may have been the last action)."""
    for model in mix_traffic.MODELS:
        requests.post(f"{target.base}/v2/repository/models/{model}/load",
                      timeout=(5, target.deadline * 2))


def start_mix(target: Target, seed: int, **counts: Any) -> tuple[Mix, Tally]:
    tally = Tally()
    mix = Mix(target, tally, seed, **counts)
    mix.start()
    return mix, tally
