"""The GPU check's repository and the checks that read the server from outside (its answers,
its processes, its log, ``/metrics``); ``bench/gpu/check.py`` runs them and says what each
one shows, ``bench/gpu/device.py`` has the ones that use CUDA in this process.

Each check returns the detail of its PASS line, raises ``Skip`` when it does not apply (with
``--cpu-only``, a check of the GPU itself: after checking what a server without a GPU must
do, which the SKIP line names) and anything else (an ``AssertionError`` saying what differs,
mostly) to fail.
"""

from __future__ import annotations

import os
import platform
import re
import time
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient

from bench.common import serving

LOG_WAIT_SECS = 30.0  # a line the executor wrote reaches the server's log file within this
METRICS_WAIT_SECS = 30.0  # the metrics frontend reads NVML every --metrics-interval-ms


def on_the_cpu(executor: str) -> bool:
    """A CPU executor: the server's own process (native backends, by default) or a CPU pool
    process (``--cpu-executor process``)."""
    return executor == "executor/inline" or executor.startswith("executor/cpu")


class Skip(Exception):
    """The check does not apply here (said why)."""


def environment_line(gpu: bool) -> str:
    import torch

    from inferd.kernel.sdk.devices import visible_gpus

    cuda = torch.cuda.is_available()
    device = torch.cuda.get_device_name(0) if cuda else "no GPU"
    return (f"python {platform.python_version()}, torch {torch.__version__} (CUDA "
            f"{torch.version.cuda or 'none'}, {device}); GPUs the server will see (driver "
            f"folder): {len(visible_gpus())}{'' if gpu else '; --cpu-only'}")


def torch_sees_a_gpu() -> str:
    import torch

    assert torch.cuda.is_available(), "torch.cuda.is_available() is False"
    return f"{torch.cuda.device_count()} GPU(s): {torch.cuda.get_device_name(0)}"


# ----------------------------------------------------------------------------- repository


def mlp(width: int, layers: int) -> Any:
    import torch

    class MLP(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.hidden = torch.nn.ModuleList(
                [torch.nn.Linear(width, width) for _ in range(layers - 1)])
            self.last = torch.nn.Linear(width, width)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            for layer in self.hidden:
                x = torch.relu(layer(x))
            return self.last(x)

    torch.manual_seed(width)
    return MLP().eval()


def _config(kind: str, width: int, *, exported: bool = False) -> str:
    if exported:  # names from the exported program's signature: x and OUTPUT__0
        head = 'backend: "pytorch"\ndefault_model_filename: "model.pt2"\nmax_batch_size: 64\n'
    else:
        head = ('platform: "pytorch_libtorch"\nmax_batch_size: 64\n'
                f'input [{{ name: "INPUT__0" data_type: TYPE_FP32 dims: [ {width} ] }}]\n'
                f'output [{{ name: "OUTPUT__0" data_type: TYPE_FP32 dims: [ {width} ] }}]\n')
    return head + f"instance_group [{{ kind: {kind} count: 1 }}]\n"


def write_repository(root: Path, *, gpu: bool, small: int, wide: int) -> list[str]:
    """The models (see ``bench/gpu/check.py``); returns their names, a CPU one first."""
    import torch

    kinds = {"cpu": "KIND_CPU", **({"gpu": "KIND_GPU"} if gpu else {})}
    model = mlp(small, 2)
    scripted = torch.jit.script(model)
    batch = torch.export.Dim("batch", max=64)
    exported = torch.export.export(model, (torch.ones(2, small),),
                                   dynamic_shapes=({0: batch},))
    wide_scripted = torch.jit.script(mlp(wide, 3))
    names: list[str] = []
    wide_file: Path | None = None
    for device, kind in kinds.items():
        for name, write, text in (
            (f"ts_{device}", lambda p: scripted.save(str(p / "model.pt")), _config(kind, small)),
            (f"export_{device}", lambda p: torch.export.save(exported, str(p / "model.pt2")),
             _config(kind, small, exported=True)),
        ):
            (root / name / "1").mkdir(parents=True)
            write(root / name / "1")
            (root / name / "config.pbtxt").write_text(text)
            names.append(name)
        folder = root / f"wide_{device}"
        (folder / "1").mkdir(parents=True)
        if wide_file is None:
            wide_file = folder / "1" / "model.pt"
            wide_scripted.save(str(wide_file))
        else:
            os.link(wide_file, folder / "1" / "model.pt")  # one file of wide*wide*3 floats
        (folder / "config.pbtxt").write_text(_config(kind, wide))
        names.append(folder.name)
    (root / "auto" / "1").mkdir(parents=True)
    scripted.save(str(root / "auto" / "1" / "model.pt"))
    (root / "auto" / "config.pbtxt").write_text(_config("KIND_AUTO", small))
    names.append("auto")
    return names


def reference(small: int, batch: np.ndarray) -> np.ndarray:
    """What the twins must answer, computed by torch in this process on the CPU."""
    import torch

    with torch.inference_mode():
        result: np.ndarray = mlp(small, 2)(torch.from_numpy(batch)).numpy()
    return result


# ------------------------------------------------------------------------------ processes


def server_processes(server: serving.Server) -> dict[str, int]:
    """The server's processes by name: ``main`` and each executor (``executor/gpu0``, ...),
    found in ``/proc`` by the ``--parent-pid`` each executor is started with."""
    found = {"main": server.process.pid}
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit():
            continue
        try:
            arguments = Path(entry.path, "cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        if b"--parent-pid" in arguments and b"--name" in arguments:
            parent = arguments[arguments.index(b"--parent-pid") + 1]
            if parent.decode() == str(server.process.pid):
                found[arguments[arguments.index(b"--name") + 1].decode()] = int(entry.name)
    return found


def environment_of(pid: int) -> dict[str, str]:
    pairs = Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
    return dict(p.decode(errors="replace").split("=", 1) for p in pairs if b"=" in p)


def cpu_seconds(pids: list[int]) -> float:
    """User and system CPU seconds of ``pids`` so far (``/proc/<pid>/stat``)."""
    total = 0
    for pid in pids:
        try:
            fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        total += int(fields[11]) + int(fields[12])  # utime, stime
    return total / os.sysconf("SC_CLK_TCK")


def executor_of(log: Path, model: str) -> str:
    """The executor whose log line says it loaded ``model``, once the line is there (one in
    the server's own process logs as ``main``: it is ``executor/inline``)."""
    pattern = re.compile(rf"\[(main|executor/[^\]]+)\] \S+: loaded {re.escape(model)} version")
    deadline = time.monotonic() + LOG_WAIT_SECS
    while True:
        found = pattern.search(log.read_text(errors="replace"))
        if found:
            return "executor/inline" if found.group(1) == "main" else found.group(1)
        if time.monotonic() > deadline:
            raise AssertionError(f"no executor's log line says it loaded {model}")
        time.sleep(0.2)


# --------------------------------------------------------------------------------- checks


@dataclass
class World:
    """The running server and what the checks share."""

    server: serving.Server
    names: list[str]
    gpu: bool
    rtol: float
    atol: float
    log: Path
    small: int = 256
    answers: dict[str, np.ndarray] = field(default_factory=dict)

    def http(self) -> Any:
        return httpclient.InferenceServerClient(self.server.address("http"))

    def grpc(self) -> Any:
        return grpcclient.InferenceServerClient(self.server.address("grpc"))

    def io_names(self, model: str) -> tuple[str, str]:
        with self.http() as client:
            metadata = client.get_model_metadata(model)
        return metadata["inputs"][0]["name"], metadata["outputs"][0]["name"]

    def io_width(self, model: str) -> int:
        with self.http() as client:
            metadata = client.get_model_metadata(model)
        return int(metadata["inputs"][0]["shape"][-1])

    def infer(self, protocol: str, model: str, batch: np.ndarray) -> np.ndarray:
        source, target = self.io_names(model)
        module = httpclient if protocol == "http" else grpcclient
        with (self.http() if protocol == "http" else self.grpc()) as client:
            tensor = module.InferInput(source, list(batch.shape), "FP32")
            tensor.set_data_from_numpy(batch)
            answer: np.ndarray = client.infer(model, [tensor]).as_numpy(target)
            return answer

    def all_ready(self) -> str:
        """Every model READY, once none is still loading (a final state for each)."""
        deadline = time.monotonic() + serving.START_TIMEOUT_SECS
        while True:
            with self.http() as client:
                index = {e["name"]: e for e in client.get_model_repository_index()}
            states = [index.get(name, {}).get("state") for name in self.names]
            if all(state in ("READY", "UNAVAILABLE") for state in states):
                break
            assert time.monotonic() < deadline, f"still loading: {index}"
            time.sleep(0.5)
        missing = [f"{name} {index.get(name, {}).get('state')}: "
                   f"{index.get(name, {}).get('reason', '')}"
                   for name in self.names if index.get(name, {}).get("state") != "READY"]
        assert not missing, "; ".join(missing)
        return f"{len(self.names)} models READY"

    def twins(self) -> str:
        batch = np.random.default_rng(0).standard_normal((5, self.small)).astype(np.float32)
        expected = reference(self.small, batch)
        compared = []
        for base in ("ts", "export", "auto"):
            for device in ("cpu", "gpu") if base != "auto" else ("",):
                name = f"{base}_{device}" if device else base
                if device == "gpu" and not self.gpu:
                    continue
                for protocol in ("http", "grpc"):
                    answer = self.infer(protocol, name, batch)
                    worst = float(np.max(np.abs(answer - expected)))
                    assert np.allclose(answer, expected, rtol=self.rtol, atol=self.atol), (
                        f"{name} over {protocol} differs from torch on the CPU by {worst:g}")
                    compared.append(f"{name}/{protocol}")
        return f"{len(compared)} answers equal torch's on the CPU: {', '.join(compared)}"

    def placement(self) -> str:
        processes = server_processes(self.server)
        with self.http() as client:
            auto_kinds = [g["kind"] for g in client.get_model_config("auto")["instance_group"]]
        where = {name: executor_of(self.log, name) for name in self.names}
        if not self.gpu:
            assert auto_kinds == ["KIND_CPU"], f"auto became {auto_kinds} without a GPU"
            assert not [p for p in processes if "gpu" in p], f"GPU executors: {processes}"
            assert all(on_the_cpu(e) for e in where.values()), where
            return f"without a GPU every model, auto too, is on a CPU executor: {where}"
        assert auto_kinds == ["KIND_GPU"], f"KIND_AUTO became {auto_kinds} with a GPU here"
        assert "executor/gpu0" in processes, f"no executor/gpu0 process: {processes}"
        executor = environment_of(processes["executor/gpu0"])
        pinned = executor.get("CUDA_VISIBLE_DEVICES")
        assert pinned == "0", f"executor/gpu0 has CUDA_VISIBLE_DEVICES={pinned!r}"
        named = executor.get("INFERD_PINNED_GPU")
        assert named == "0", f"executor/gpu0 has INFERD_PINNED_GPU={named!r}"
        for name, executor in where.items():
            on_gpu = name.endswith("_gpu") or name == "auto"
            assert (executor == "executor/gpu0") == on_gpu, f"{name} loaded on {executor}"
        main = environment_of(processes["main"]).get("CUDA_VISIBLE_DEVICES")
        return (f"GPU twins and auto (KIND_GPU) on executor/gpu0 (pid "
                f"{processes['executor/gpu0']}, CUDA_VISIBLE_DEVICES=0; the server's own: "
                f"{main!r}); CPU twins on {sorted({e for e in where.values() if on_the_cpu(e)})}")

    def gpu_metrics(self) -> str:
        from prometheus_client.parser import text_string_to_metric_families

        url = f"http://{self.server.address('metrics')}/metrics"
        wanted = ("nv_gpu_utilization", "nv_gpu_memory_total_bytes", "nv_gpu_memory_used_bytes",
                  "nv_gpu_power_usage", "nv_gpu_power_limit", "nv_energy_consumption")
        deadline = time.monotonic() + (METRICS_WAIT_SECS if self.gpu else 0)
        while True:
            with urllib.request.urlopen(url, timeout=10) as response:
                text = response.read().decode()
            values = {sample.name: sample for family in text_string_to_metric_families(text)
                      for sample in family.samples
                      if sample.name.startswith(("nv_gpu_", "nv_energy_"))}
            if not self.gpu or all(name in values for name in wanted[:3]):
                break
            if time.monotonic() > deadline:
                raise AssertionError(f"/metrics has no {', '.join(wanted[:3])} after "
                                     f"{METRICS_WAIT_SECS:g} s; it has {sorted(values)}")
            time.sleep(0.5)
        if not self.gpu:
            assert not values, f"GPU metrics without a GPU: {sorted(values)}"
            raise Skip("no GPU, so no values to read; checked instead: no nv_gpu_* family "
                       "without a GPU, as Triton")
        used, total = values["nv_gpu_memory_used_bytes"], values["nv_gpu_memory_total_bytes"]
        utilization = values["nv_gpu_utilization"].value
        assert total.value > 0 and 0 < used.value <= total.value, (used.value, total.value)
        assert 0.0 <= utilization <= 1.0, utilization
        assert used.labels.get("gpu_uuid", "").startswith("GPU-"), used.labels
        shown = ", ".join(f"{n}={values[n].value:g}" for n in wanted if n in values)
        absent = [n for n in wanted if n not in values]
        return shown + (f" (absent: {', '.join(absent)})" if absent else "")

    def cuda_shared_memory(self) -> str:
        from bench.gpu import device as gpu_check_device

        return gpu_check_device.cuda_shared_memory(self)

    def throughput(self, batches: list[int], concurrency: int, seconds: float) -> str:
        from bench.gpu import device as gpu_check_device

        return gpu_check_device.throughput(self, batches, concurrency, seconds)
