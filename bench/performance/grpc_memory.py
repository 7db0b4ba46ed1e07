"""What one large ``ModelInfer`` costs the server in memory, in the main process and in the
executor process.

The script starts ``inferd serve`` on free loopback ports (EXPLICIT mode, only
``identity_fp32`` loaded, ``--grpc-max-input-size`` raised so the largest tensor fits), then
for each ``--sizes-mib`` sends one FP32 tensor of that size through ``tritonclient.grpc`` and
checks the echo. Before each request it resets both processes' peak resident size (writing
``5`` to ``/proc/PID/clear_refs``, Linux 4.0 and later) and notes their current resident size;
while the request runs a thread samples ``VmRSS`` every ``--sample-ms``; afterwards it reads
``VmHWM``. A process's growth is its peak (the larger of ``VmHWM`` and the sampled maximum)
minus its resident size just before the request; ``×tensor`` is that growth divided by the
tensor's size, so 1.0 means the process held one extra copy of the tensor at its worst
moment. The client runs in this process, so its own copies are not counted. The executor is
the server's one child process running ``inferd.kernel.actors.executor.main``.

Run as ``.venv/bin/python -m bench.performance.grpc_memory [--sizes-mib 256 1024]``; it needs
about eight times the largest tensor in free memory (client copies included).
"""

from __future__ import annotations

import argparse
import threading
import time
from pathlib import Path

import numpy as np
import tritonclient.grpc as grpcclient

from bench.common import serving

REPOSITORY = Path(__file__).resolve().parents[2] / "model_repository"
MODEL = "identity_fp32"
MIB = 2**20


def _status_kib(pid: int, field: str) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1])
    raise KeyError(field)


def _reset_peak(pid: int) -> bool:
    try:
        Path(f"/proc/{pid}/clear_refs").write_text("5")
    except OSError:
        return False
    return True


def _executor_pid(main_pid: int) -> int:
    for _ in range(100):
        children = Path(f"/proc/{main_pid}/task/{main_pid}/children").read_text().split()
        for child in children:
            command = Path(f"/proc/{child}/cmdline").read_bytes().replace(b"\0", b" ")
            if b"executor_process" in command:
                return int(child)
        time.sleep(0.1)
    raise RuntimeError("the server has no executor process")


class _Sampler:
    """The largest ``VmRSS`` of each process, sampled on a thread until stopped."""

    def __init__(self, pids: list[int], interval: float) -> None:
        self.peaks = {pid: 0 for pid in pids}
        self._interval = interval
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        while not self._stop.is_set():
            for pid in self.peaks:
                self.peaks[pid] = max(self.peaks[pid], _status_kib(pid, "VmRSS"))
            time.sleep(self._interval)

    def __enter__(self) -> _Sampler:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()


def measure(server: serving.Server, sizes_mib: list[int], sample_ms: float) -> list[str]:
    main_pid = server.process.pid
    executor_pid = _executor_pid(main_pid)
    rows = []
    with grpcclient.InferenceServerClient(server.address("grpc")) as client:
        # A small request first, so lazily created state is not charged to the first size.
        warm = np.ones(16, dtype=np.float32)
        infer_input = grpcclient.InferInput("INPUT0", list(warm.shape), "FP32")
        infer_input.set_data_from_numpy(warm)
        client.infer(MODEL, [infer_input])
        for size_mib in sizes_mib:
            tensor = np.arange(size_mib * MIB // 4, dtype=np.float32)
            infer_input = grpcclient.InferInput("INPUT0", list(tensor.shape), "FP32")
            infer_input.set_data_from_numpy(tensor)
            pids = [main_pid, executor_pid]
            before = {}
            for pid in pids:
                if not _reset_peak(pid):
                    raise RuntimeError(f"cannot reset the peak resident size of {pid}")
                before[pid] = _status_kib(pid, "VmRSS")
            started = time.perf_counter()
            with _Sampler(pids, sample_ms / 1000) as sampler:
                result = client.infer(MODEL, [infer_input])
            seconds = time.perf_counter() - started
            output = result.as_numpy("OUTPUT0")
            if output is None or not np.array_equal(output, tensor):
                raise RuntimeError(f"the {size_mib} MiB echo differs from its input")
            growth = {
                pid: (max(_status_kib(pid, "VmHWM"), sampler.peaks[pid]) - before[pid]) / 1024
                for pid in pids
            }
            main_mib, executor_mib = growth[main_pid], growth[executor_pid]
            rows.append(
                f"{size_mib:>8} MiB  {main_mib:>10.0f} MiB {main_mib / size_mib:>7.2f}"
                f"  {executor_mib:>10.0f} MiB {executor_mib / size_mib:>7.2f}  {seconds:>7.2f}"
            )
            del result, output, infer_input, tensor
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sizes-mib", type=int, nargs="+", default=[256, 1024])
    parser.add_argument("--sample-ms", type=float, default=10.0)
    args = parser.parse_args()
    limit = max(args.sizes_mib) * MIB + MIB
    with serving.temporary_folder("inferd-bench-grpc-memory-") as folder:
        flags = ("--model-control-mode", "explicit", "--load-model", MODEL,
                 "--grpc-max-input-size", str(limit))
        with serving.running(REPOSITORY, *flags, log=folder / "inferd.log", model=MODEL,
                             via="grpc") as server:
            rows = measure(server, args.sizes_mib, args.sample_ms)
    print(f"{'tensor':>12}  {'main growth':>14} {'×tensor':>7}  {'executor growth':>14} "
          f"{'×tensor':>7}  {'seconds':>7}")
    for row in rows:
        print(row)


if __name__ == "__main__":
    main()
