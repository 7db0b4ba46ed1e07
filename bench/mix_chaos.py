"""The chaos mix run against a real server: the client threads of ``mix_traffic``, the chaos
actions.

Owns ``Mix`` (a thread per client, each looping on its kind of request and tallying every
outcome until told to stop), ``Chaos`` (SIGKILL an executor, reload a model, unload and load
one again, unregister every shared memory region, kill every executor at once; each action's
recovery time, until every model is READY again). What is measured of the server and the
report's tables are ``mix_measure``'s. It starts no server.
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
from typing import Any

import psutil
import requests
import tritonclient.grpc as grpcclient
from tritonclient.utils import InferenceServerException

import mix_clients
import mix_traffic
from mix_measure import executors
from mix_traffic import Tally, Target, Wrong

from inferd.protocols.client import Client as NativeClient
from inferd.protocols.errors import InferdError



# ---------------------------------------------------------------- client threads

RETRY_AFTER_SECS = 0.05  # as a client told to retry does, rather than at once


def _guarded(kind: str, tally: Tally, once: Callable[[], tuple[str, str]],
             on_lost: Callable[[], None] = lambda: None) -> None:
    """One request through ``once``, its outcome tallied whatever happens."""
    started = time.monotonic()
    try:
        outcome, detail = once()
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
        else:
            outcome = mix_traffic.judge_grpc(error) if str(error.status()).startswith(
                "StatusCode.") else mix_traffic.judge_http(int(error.status()),
                                                           error.message() or "")
            detail = f"{error.status()} {error.message()}"
    except InferdError as error:
        outcome, detail = mix_traffic.judge_native(error), f"{error.code.value} {error.message}"
    tally.add(kind, outcome, detail, time.monotonic() - started)
    if outcome == "retryable":
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
            _guarded("HTTP", self.tally,
                     lambda: mix_traffic.http_once(session, self.target, rng), fresh)

    def _grpc(self, rng: random.Random) -> None:
        with grpcclient.InferenceServerClient(self.target.grpc) as client:
            while not self.stop.is_set():
                _guarded("gRPC unary", self.tally,
                         lambda: mix_traffic.grpc_once(client, self.target, rng))

    def _sequence(self, rng: random.Random) -> None:
        sequences = mix_clients.Sequences(rng.randint(1, 1 << 40), rng)
        with grpcclient.InferenceServerClient(self.target.grpc) as client:
            while not self.stop.is_set():
                _guarded("gRPC sequence", self.tally,
                         lambda: sequences.once(client, self.target))

    def _stream(self, rng: random.Random) -> None:
        stream = mix_clients.Stream(self.target)
        try:
            while not self.stop.is_set():
                _guarded("gRPC stream", self.tally, lambda: stream.once(rng))
        finally:
            stream.close()

    def _native(self, rng: random.Random) -> None:
        with NativeClient(self.target.zmq, timeout=self.target.deadline) as client:
            while not self.stop.is_set():
                _guarded("zmq", self.tally,
                         lambda: mix_traffic.native_once(client, self.target, rng))

    def _shared_memory(self, rng: random.Random) -> None:
        key = f"/inferd_chaos_{os.getpid()}_{rng.randrange(1 << 30)}"
        region = mix_clients.SharedMemoryClient(self.target, key)
        self.regions.append(region)
        while not self.stop.is_set():
            _guarded("shared memory", self.tally, lambda: region.once(rng))

    def _breaker(self, rng: random.Random) -> None:
        with grpcclient.InferenceServerClient(self.target.grpc) as client:
            while not self.stop.wait(rng.uniform(0.01, 0.1)):
                try:
                    if rng.random() < 0.5:
                        mix_clients.break_http(self.target, rng)
                    else:
                        mix_clients.break_grpc(client, rng)
                    self.tally.add("broken by the client", "own doing", "broken on purpose")
                except OSError as error:
                    self.tally.add("broken by the client", "lost", str(error))


# ---------------------------------------------------------------- chaos


@dataclass
class Chaos:
    """The chaos actions on one server, each counted, with how long the server took to have
    every model READY again after it."""

    server_pid: int
    target: Target
    tally: Tally
    actions: Counter[str] = field(default_factory=Counter)
    recoveries: dict[str, list[float]] = field(default_factory=dict)
    killed: set[int] = field(default_factory=set)

    def kill(self, victims: list[psutil.Process], what: str) -> None:
        if not victims:
            return
        started = time.monotonic()
        for victim in victims:
            try:
                self.killed.add(victim.pid)
                os.kill(victim.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        self.actions[what] += 1
        for victim in victims:
            try:
                victim.wait(self.target.deadline)
            except psutil.Error:
                pass
        self._recovered(what, started)

    def kill_one(self, rng: random.Random) -> None:
        found = executors(self.server_pid)
        self.kill([rng.choice(found)] if found else [], "SIGKILL an executor")

    def kill_all(self) -> None:
        self.kill(executors(self.server_pid), "SIGKILL every executor")

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
        message = mix_traffic.error_of(response)
        self.tally.add("control", "ok" if ok else mix_traffic.judge_http(
            response.status_code, message), f"{action} {model}: {response.status_code} "
            f"{message}")
        return ok

    def reload(self, model: str) -> None:
        started = time.monotonic()
        self.actions["reload a model"] += 1
        if self.control("load", model):
            self._recovered("reload a model", started)

    def unload_and_load(self, model: str, pause: float) -> None:
        self.actions["unload, then load a model"] += 1
        self.control("unload", model)
        time.sleep(pause)  # clients meet the model unloaded meanwhile
        started = time.monotonic()
        if self.control("load", model):
            self._recovered("unload, then load a model", started)

    def unregister_regions(self) -> None:
        try:
            requests.post(f"{self.target.base}/v2/systemsharedmemory/unregister",
                          timeout=(5, self.target.deadline))
            self.actions["unregister every shared memory region"] += 1
        except requests.RequestException as error:
            self.tally.add("control", "lost", f"unregister regions: {error}")

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

    def _recovered(self, what: str, started: float) -> None:
        """Wait (bounded) until every model is READY; note how long that took."""
        if wait_all_ready(self.target, self.target.deadline):
            self.recoveries.setdefault(what, []).append(time.monotonic() - started)
        else:
            self.tally.add("control", "hung", f"after {what}: not every model READY within "
                           f"{self.target.deadline} s")


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
