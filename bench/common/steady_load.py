"""A steady closed-loop load of tritonclient HTTP and gRPC requests for ``simple``, one thread
per protocol, that counts successes and failures with their messages (``LoadCounts``), so a
test or bench can say what a restart, a crash or a scale-out cost the clients.

Owns the load's threads and counts; it starts no server and judges nothing.
"""

from __future__ import annotations

import threading
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np

REQUEST_TIMEOUT_SECS = 20.0  # one inference through nginx; past it the request failed


def simple_inputs() -> dict[str, np.ndarray]:
    """``simple``'s two INT32 [1, 16] inputs."""
    row = np.arange(16, dtype=np.int32).reshape(1, 16)
    return {"INPUT0": row, "INPUT1": np.ones_like(row)}


@dataclass
class Failure:
    at: float  # time.monotonic() when it failed
    protocol: str
    message: str


@dataclass
class LoadCounts:
    successes: Counter[str] = field(default_factory=Counter)  # per protocol
    failures: list[Failure] = field(default_factory=list)

    @property
    def total_successes(self) -> int:
        return sum(self.successes.values())

    def summary(self) -> str:
        kinds = Counter(f"{f.protocol}: {f.message[:200]}" for f in self.failures)
        lines = [f"{dict(self.successes)} succeeded, {len(self.failures)} failed"]
        lines += [f"  {n} x {kind}" for kind, n in kinds.most_common()]
        return "\n".join(lines)


class SteadyLoad:
    """A closed loop of ``http_workers`` tritonclient HTTP and ``grpc_workers`` tritonclient
    gRPC threads, each with its own client, each sending ``simple`` inferences back to back
    to ``http_url``/``grpc_url`` and checking the sums. ``counts()`` and ``since(mark)``
    read the tallies while it runs."""

    def __init__(self, http_url: str, grpc_url: str, *, model: str = "simple",
                 http_workers: int = 1, grpc_workers: int = 1) -> None:
        self.http_url = http_url
        self.grpc_url = grpc_url
        self.model = model
        self.concurrency = http_workers + grpc_workers
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._counts = LoadCounts()
        self._threads = [threading.Thread(target=self._run, args=(protocol,), daemon=True,
                                          name=f"load-{protocol}-{i}")
                         for protocol, workers in (("http", http_workers),
                                                   ("grpc", grpc_workers))
                         for i in range(workers)]

    def __enter__(self) -> SteadyLoad:
        for thread in self._threads:
            thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def stop(self) -> LoadCounts:
        self._stop.set()
        for thread in self._threads:
            thread.join(REQUEST_TIMEOUT_SECS + 5)
        return self.counts()

    def counts(self) -> LoadCounts:
        with self._lock:
            return LoadCounts(Counter(self._counts.successes), list(self._counts.failures))

    def since(self, mark: LoadCounts) -> LoadCounts:
        now = self.counts()
        return LoadCounts(now.successes - mark.successes, now.failures[len(mark.failures):])

    def _record(self, protocol: str, error: str | None) -> None:
        with self._lock:
            if error is None:
                self._counts.successes[protocol] += 1
            else:
                self._counts.failures.append(Failure(time.monotonic(), protocol, error))

    def _run(self, protocol: str) -> None:
        infer = self._http_infer() if protocol == "http" else self._grpc_infer()
        expected = simple_inputs()["INPUT0"] + simple_inputs()["INPUT1"]
        while not self._stop.is_set():
            try:
                sums = infer()
                error = None if np.array_equal(sums, expected) else f"wrong sums {sums}"
            except Exception as failure:  # noqa: BLE001 - every failure is counted and kept
                error = f"{type(failure).__name__}: {failure}"
            self._record(protocol, error)

    def _http_infer(self) -> Callable[[], np.ndarray]:
        import tritonclient.http as httpclient

        client = httpclient.InferenceServerClient(
            self.http_url, connection_timeout=REQUEST_TIMEOUT_SECS,
            network_timeout=REQUEST_TIMEOUT_SECS)
        inputs = []
        for name, value in simple_inputs().items():
            tensor = httpclient.InferInput(name, list(value.shape), "INT32")
            tensor.set_data_from_numpy(value, binary_data=True)
            inputs.append(tensor)
        outputs = [httpclient.InferRequestedOutput("OUTPUT0", binary_data=True)]

        def infer() -> np.ndarray:
            result = client.infer(self.model, inputs, outputs=outputs)
            return result.as_numpy("OUTPUT0")  # type: ignore[no-any-return]

        return infer

    def _grpc_infer(self) -> Callable[[], np.ndarray]:
        import tritonclient.grpc as grpcclient

        client = grpcclient.InferenceServerClient(self.grpc_url)
        inputs = []
        for name, value in simple_inputs().items():
            tensor = grpcclient.InferInput(name, list(value.shape), "INT32")
            tensor.set_data_from_numpy(value)
            inputs.append(tensor)
        outputs = [grpcclient.InferRequestedOutput("OUTPUT0")]

        def infer() -> np.ndarray:
            result = client.infer(self.model, inputs, outputs=outputs,
                                  client_timeout=REQUEST_TIMEOUT_SECS)
            return result.as_numpy("OUTPUT0")  # type: ignore[no-any-return]

        return infer
