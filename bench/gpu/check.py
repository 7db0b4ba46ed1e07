"""The GPU check (``bench/gpu_check.sh`` runs it): does inferd really serve torch models on
CUDA, with the CPU's answers, and the GPU extensions Triton has?

One ``inferd serve`` (EXPLICIT mode, every model loaded) on a repository written into a
temporary folder: an MLP as TorchScript (``ts``) and as ``torch.export`` (``export``), each a
``KIND_CPU`` twin and a ``KIND_GPU`` twin of the same file, the TorchScript once more as
``KIND_AUTO`` (``auto``), and a wide MLP (``--width``, 3 layers) twice for the throughput
table (``wide_cpu``, ``wide_gpu``). The checks (``bench/gpu/parts.py``), each ending in
one PASS, FAIL or SKIP line:

- ``ready``: every model is READY;
- ``twins``: every GPU twin answers the same batch as its CPU twin, over HTTP and gRPC;
- ``placement``: the GPU twins and ``auto`` loaded on ``executor/gpu0``, a process that
  ``CUDA_VISIBLE_DEVICES=0`` pins; ``auto``'s config says ``KIND_GPU``;
- ``zero_copy``: in this process, through the pytorch backend itself: numpy and torch share
  the inputs' and outputs' memory on the CPU (and through DLPack), and on the GPU a batch costs
  one host-to-device copy per input and one device-to-host copy per output (torch's profiler);
- ``gpu_metrics``: ``/metrics`` has the ``nv_gpu_*`` families with real values;
- ``cuda_shm``: CUDA shared memory end to end with ``tritonclient.utils.cuda_shared_memory``
  over HTTP and gRPC (inputs and outputs in GPU regions, status, unregister);
- ``shm_in_place``: the GPU twin reads and writes CUDA shared memory on the device: through
  the backend in this process a batch costs no copy through the host, one device-to-device
  copy per output (torch's profiler), and ``executor/gpu0`` opened the client's regions itself
  (its log line);
- ``throughput``: requests/s and p50 of the wide MLP at each ``--batches`` size with
  ``--concurrency`` gRPC clients on CPU and GPU, with the server's CPU time per inference.

``--cpu-only`` (no GPU here) serves the CPU models only and turns each GPU check into what a
server without a GPU must do: ``auto`` on the CPU, no ``nv_gpu_*`` family, a CUDA register
refused with Triton's message, a batch for a GPU instance carrying CUDA windows and no
bytes. What it cannot check there it reports as SKIP, never PASS: ``zero_copy`` (no GPU
copies to count), ``gpu_metrics``, ``cuda_shm`` and ``shm_in_place`` end in a SKIP line that
names what was checked instead (a FAIL where that fails); ``ready``, ``twins``, ``placement``
and ``throughput`` pass on what they check of the CPU models. ``--log-dir`` gets this run's
output (``gpu_check.log``, kept by the shell script), the server's log and ``summary.txt``.
Exit status 0 when no check failed.
"""

from __future__ import annotations

import argparse
import sys
import time
import traceback
from collections.abc import Callable
from pathlib import Path

from bench.common import serving
from bench.gpu import device as gpu_check_device
from bench.gpu import parts

ROOT = Path(__file__).resolve().parents[2]
SMALL = 256  # the twins' width: enough to compare, quick on any CPU


class Report:
    """The checks' verdicts, in order, each printed as it comes and once more at the end."""

    def __init__(self) -> None:
        self.rows: list[tuple[str, str, str]] = []

    def run(self, name: str, check: Callable[[], str | None]) -> None:
        """``check`` returns the detail of its PASS line; it raises ``parts.Skip`` to skip
        and anything else to fail."""
        print(f"== {name}", flush=True)
        try:
            detail = check() or ""
            self.add(name, "PASS", detail)
        except parts.Skip as skip:
            self.add(name, "SKIP", str(skip))
        except Exception as error:  # noqa: BLE001 - every failure becomes a FAIL line
            traceback.print_exc()
            self.add(name, "FAIL", f"{type(error).__name__}: {error}".splitlines()[0])

    def add(self, name: str, verdict: str, detail: str) -> None:
        self.rows.append((name, verdict, detail))
        print(f"   {verdict} {name}: {detail}", flush=True)

    def summary(self) -> str:
        return "\n".join(f"{verdict:<4} {name:<12} {detail}".rstrip()
                         for name, verdict, detail in self.rows)

    @property
    def failed(self) -> bool:
        return any(verdict == "FAIL" for _, verdict, _ in self.rows)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--log-dir", type=Path, required=True)
    parser.add_argument("--cpu-only", action="store_true", help="no GPU here: a smoke run")
    parser.add_argument("--width", type=int, default=None,
                        help="the wide MLP's width (4096; 256 with --cpu-only)")
    parser.add_argument("--batches", default=None, help="1,8,64 (1,8 with --cpu-only)")
    parser.add_argument("--concurrency", type=int, default=16)
    parser.add_argument("--seconds", type=float, default=None,
                        help="per throughput point (3; 1 with --cpu-only)")
    parser.add_argument("--rtol", type=float, default=1e-3)
    parser.add_argument("--atol", type=float, default=1e-3)
    args = parser.parse_args(argv)
    gpu = not args.cpu_only
    width = args.width or (4096 if gpu else SMALL)
    batches = [int(b) for b in (args.batches or ("1,8,64" if gpu else "1,8")).split(",")]
    seconds = args.seconds if args.seconds is not None else (3.0 if gpu else 1.0)
    args.log_dir.mkdir(parents=True, exist_ok=True)
    report = Report()
    began = time.monotonic()
    print(parts.environment_line(gpu), flush=True)
    if gpu:
        report.run("cuda", parts.torch_sees_a_gpu)
    with serving.temporary_folder("gpu-check-") as folder:
        repository = folder / "repository"
        names = parts.write_repository(repository, gpu=gpu, small=SMALL, wide=width)
        print(f"repository: {', '.join(names)}", flush=True)
        flags = ["--model-control-mode=explicit", "--load-model=*", "--exit-on-error=false",
                 "--metrics-interval-ms=500", "--log-verbose=0", "--allow-client-shm=true"]
        log = args.log_dir / "inferd.log"
        with serving.running(repository, *flags, log=log, model=names[0], via="http",
                             cwd=ROOT) as server:
            world = parts.World(server, names, gpu, args.rtol, args.atol, log, SMALL)
            report.run("ready", world.all_ready)
            report.run("twins", world.twins)
            report.run("placement", world.placement)
            report.run("zero_copy", lambda: gpu_check_device.zero_copy(gpu, repository))
            report.run("gpu_metrics", world.gpu_metrics)
            report.run("cuda_shm", world.cuda_shared_memory)
            report.run("shm_in_place", lambda: gpu_check_device.in_place(world, repository))
            report.run("throughput", lambda: world.throughput(batches, args.concurrency,
                                                               seconds))
    summary = report.summary()
    print(f"\n== summary ({time.monotonic() - began:.0f} s)\n{summary}", flush=True)
    (args.log_dir / "summary.txt").write_text(summary + "\n")
    return 1 if report.failed else 0


if __name__ == "__main__":
    sys.exit(main())
