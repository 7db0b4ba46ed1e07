"""perf_analyzer, as every bench that drives it uses it: installed once into
``bench/.peers/perf_analyzer`` (tritonclient's wheel, which ships the binary, in a venv of
its own, with the ``libb64`` it links), then run one point at a time (a closed loop of C
synchronous requests, windows until the last three agree) and its output read back: the
CSV's infer/s and percentiles, each window's rate, the server's own breakdown of a request,
and the lines that mean the numbers are not to be trusted (``Measurement``).

Owns the installation and one run's command line and parsing; it starts no server and
formats no table.
"""

from __future__ import annotations

import argparse
import csv
import glob
import os
import re
import shutil
import subprocess
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from bench.common import serving

ROOT = Path(__file__).resolve().parents[2]
MODEL = "simple"  # what a run measures unless told otherwise
PEER_FOLDER = ROOT / "bench" / ".peers" / "perf_analyzer"
TRITONCLIENT_VERSION = "2.48.0"
LIBB64 = Path("/usr/lib/x86_64-linux-gnu/libb64.so.0d")
# perf_analyzer's own overhead on top of its windows: start-up, warm-up, metadata calls.
PERF_ANALYZER_SLACK_SECS = 60.0
# Lines of perf_analyzer's output that mean the numbers are not to be trusted.
TROUBLE_MARKERS = ("error", "failed", "unstable", "not stable", "warning")
# With -v perf_analyzer prints one line per measurement window, and the server's own
# breakdown of a request (from the statistics endpoint) once the measurement is stable.
WINDOW_LINE = re.compile(r"Pass \[\d+\] throughput: ([\d.]+) infer/sec")
SERVER_LINE = re.compile(r"Avg request latency: .*")
# apt-get's progress counter, one line per percent once split.
APT_PROGRESS = re.compile(r"^\(Reading database \.\.\. \d+%$")


@dataclass(frozen=True)
class PerfAnalyzer:
    binary: Path
    environment: dict[str, str]
    version: str


@dataclass(frozen=True)
class Measurement:
    protocol: str
    concurrency: int
    infer_per_s: float | None
    p50_us: float | None
    p99_us: float | None
    window_ms: int
    problem: str | None  # perf_analyzer's own words when it failed or was unstable
    unstable: bool = False  # it gave up because its windows never agreed
    windows: tuple[float, ...] = ()  # infer/s of each measurement window, in order
    server_breakdown: str | None = None


# ------------------------------------------------------------------------------ setup


def step(message: str) -> None:
    print(f"[setup] {message}", flush=True)


def run_shown(
    command: Sequence[str], environment: dict[str, str] | None = None,
    timeout: float | None = None,
) -> subprocess.CompletedProcess[str]:
    """Run a setup command, echoing it and its output, so a slow or failing step is visible."""
    step("$ " + " ".join(command))
    result = subprocess.run(command, text=True, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, env=environment, check=False,
                            timeout=timeout)
    lines = [line for line in result.stdout.splitlines() if not APT_PROGRESS.match(line)]
    for line in lines[-15:]:
        print(f"    {line}", flush=True)
    return result


def ensure_libb64() -> None:
    if LIBB64.exists():
        step(f"{LIBB64} present")
        return
    if shutil.which("apt-get") is None:
        raise RuntimeError(f"{LIBB64} is missing and there is no apt-get to install libb64-0d")
    step(f"{LIBB64} missing: installing libb64-0d")
    environment = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
    install = ["apt-get", "install", "-y", "libb64-0d"]
    if run_shown(install, environment).returncode != 0:
        # A fresh image has no package lists yet.
        run_shown(["apt-get", "update"], environment)
        if run_shown(install, environment).returncode != 0:
            raise RuntimeError("apt-get could not install libb64-0d")
    if not LIBB64.exists():
        raise RuntimeError(f"libb64-0d installed but {LIBB64} is still missing")


def base_python() -> str:
    """The interpreter under this venv, so the peer venv shares nothing with the project's."""
    return getattr(sys, "_base_executable", None) or sys.executable


def ensure_peer_venv() -> Path:
    python = PEER_FOLDER / "bin" / "python"
    binary = PEER_FOLDER / "bin" / "perf_analyzer"
    if not python.exists():
        step(f"creating venv {PEER_FOLDER.relative_to(ROOT)}")
        PEER_FOLDER.parent.mkdir(parents=True, exist_ok=True)
        if run_shown([base_python(), "-m", "venv", str(PEER_FOLDER)]).returncode != 0:
            raise RuntimeError("could not create the perf_analyzer venv")
    if not binary.exists() or not cuda_runtime_folders():
        step(f"installing tritonclient=={TRITONCLIENT_VERSION} and nvidia-cuda-runtime-cu12")
        pip = [str(python), "-m", "pip", "install", "--quiet",
               f"tritonclient=={TRITONCLIENT_VERSION}", "nvidia-cuda-runtime-cu12"]
        if run_shown(pip).returncode != 0:
            raise RuntimeError("pip could not install tritonclient into the perf_analyzer venv")
    else:
        step(f"perf_analyzer venv present ({PEER_FOLDER.relative_to(ROOT)})")
    if not binary.exists():
        raise RuntimeError(f"tritonclient=={TRITONCLIENT_VERSION} installed no {binary}")
    return binary


def cuda_runtime_folders() -> list[str]:
    pattern = str(PEER_FOLDER / "lib" / "python3*" / "site-packages" / "nvidia" / "cuda_runtime"
                  / "lib")
    return sorted(glob.glob(pattern))


def peer_environment() -> dict[str, str]:
    folders = cuda_runtime_folders()
    if not folders:
        raise RuntimeError("nvidia-cuda-runtime-cu12 is not installed in the perf_analyzer venv")
    inherited = os.environ.get("LD_LIBRARY_PATH")
    library_path = ":".join([*folders, *([inherited] if inherited else [])])
    return {**os.environ, "LD_LIBRARY_PATH": library_path}


def installed_version(binary: Path) -> str:
    """perf_analyzer has no --version: the wheel it came from names it."""
    python = binary.parent / "python"
    query = "import importlib.metadata as m; print(m.version('tritonclient'))"
    result = subprocess.run([str(python), "-c", query], capture_output=True, text=True,
                            check=False)
    return f"tritonclient {result.stdout.strip() or '?'}"


def check_runs(binary: Path, environment: dict[str, str]) -> None:
    """Run it without arguments (it prints usage): catches a missing shared library early."""
    result = subprocess.run([str(binary)], capture_output=True, text=True, env=environment,
                            check=False, timeout=30)
    output = result.stdout + result.stderr
    if "error while loading shared libraries" in output or "Usage" not in output:
        raise RuntimeError(f"perf_analyzer does not start:\n{output.strip()[-2000:]}")


def setup_perf_analyzer(skip: bool) -> PerfAnalyzer:
    binary = PEER_FOLDER / "bin" / "perf_analyzer"
    if skip:
        step("--skip-setup: using what is already in bench/.peers/perf_analyzer")
        if not binary.exists():
            raise RuntimeError(f"{binary} is missing: run once without --skip-setup")
    else:
        ensure_libb64()
        binary = ensure_peer_venv()
    environment = peer_environment()
    check_runs(binary, environment)
    version = installed_version(binary)
    step(f"perf_analyzer ready: {version}")
    return PerfAnalyzer(binary, environment, version)


# ------------------------------------------------------------------------------ perf_analyzer


def perf_analyzer_command(
    tool: PerfAnalyzer, url: str, protocol: str, concurrency: int, window_ms: int,
    args: argparse.Namespace, csv_path: Path, model: str = MODEL, extra: Sequence[str] = (),
) -> list[str]:
    return [
        str(tool.binary), "-m", model, "-u", url, "-i", protocol,
        "--concurrency-range", f"{concurrency}:{concurrency}",
        "-p", str(window_ms), "-s", str(args.stability), "-r", str(args.max_trials),
        "-f", str(csv_path), "-v", *extra,
    ]


def trouble_lines(output: str) -> list[str]:
    return [line.strip() for line in output.splitlines()
            if any(marker in line.lower() for marker in TROUBLE_MARKERS)]


def window_rates(output: str) -> tuple[float, ...]:
    return tuple(float(match) for match in WINDOW_LINE.findall(output))


def server_breakdown(output: str) -> str | None:
    match = SERVER_LINE.search(output)
    return match.group(0).strip() if match else None


def spread(windows: Sequence[float]) -> str:
    return " ".join(f"{rate:,.0f}" for rate in windows)


def parse_csv(csv_path: Path) -> tuple[float, float, float]:
    """Inferences/Second and the p50/p99 latency columns (µs) of the one concurrency row."""
    with csv_path.open(newline="") as source:
        rows = list(csv.DictReader(source))
    if len(rows) != 1:
        raise ValueError(f"expected one row in {csv_path.name}, found {len(rows)}")
    row = rows[0]
    return (float(row["Inferences/Second"]), float(row["p50 latency"]),
            float(row["p99 latency"]))


def measure(
    tool: PerfAnalyzer, server: serving.Server, protocol: str, concurrency: int,
    args: argparse.Namespace, folder: Path, *, model: str = MODEL, extra: Sequence[str] = (),
    prefix: Sequence[str] = (),
) -> Measurement:
    """One perf_analyzer run; when its windows never agree, again with windows twice as long,
    as perf_analyzer itself advises (a longer window averages out the machine's hiccups).
    ``extra`` options go to perf_analyzer, ``prefix`` before it (``taskset -c 0``, say)."""
    window_ms = args.window_ms
    options = {"model": model, "extra": extra, "prefix": prefix}
    measurement = run_perf_analyzer(tool, server, protocol, concurrency, window_ms, args, folder,
                                    **options)
    for _ in range(args.retries):
        if not measurement.unstable:
            break
        window_ms *= 2
        print(f"  not stable: again with {window_ms} ms windows", flush=True)
        measurement = run_perf_analyzer(tool, server, protocol, concurrency, window_ms, args,
                                        folder, **options)
    return measurement


def run_perf_analyzer(
    tool: PerfAnalyzer, server: serving.Server, protocol: str, concurrency: int,
    window_ms: int, args: argparse.Namespace, folder: Path, *, model: str = MODEL,
    extra: Sequence[str] = (), prefix: Sequence[str] = (),
) -> Measurement:
    csv_path = folder / f"{protocol}-c{concurrency}-{window_ms}ms.csv"
    command = perf_analyzer_command(tool, server.address(protocol), protocol, concurrency,
                                    window_ms, args, csv_path, model, extra)
    print(f"\n$ {' '.join(prefix)}{' ' if prefix else ''}perf_analyzer {' '.join(command[1:])}",
          flush=True)
    command = [*prefix, *command]
    limit = window_ms / 1000 * args.max_trials + PERF_ANALYZER_SLACK_SECS
    try:
        result = subprocess.run(command, env=tool.environment, capture_output=True, text=True,
                                timeout=limit, check=False)
    except subprocess.TimeoutExpired as expired:
        partial = expired.stdout if isinstance(expired.stdout, str) else ""
        problem = f"timed out after {limit:g} s\n{partial}"
        return failed(Measurement(protocol, concurrency, None, None, None, window_ms, problem))
    output = (result.stdout + result.stderr).strip()
    if args.verbose:
        print(indent(output), flush=True)
    windows = window_rates(output)
    if windows:
        print(f"  windows (infer/s): {spread(windows)}", flush=True)
    if result.returncode != 0 or not csv_path.exists():
        # Instability is the machine's; anything else is a server bug, reported in full.
        unstable = "stable measurement" in output and "error" not in output.lower()
        detail = "\n".join(trouble_lines(output)) if unstable else output
        return failed(Measurement(protocol, concurrency, None, None, None, window_ms,
                                  f"exit code {result.returncode}\n{detail}", unstable, windows))
    infer_per_s, p50_us, p99_us = parse_csv(csv_path)
    trouble = trouble_lines(output)
    warnings = "\n".join(trouble) if trouble else None
    breakdown = server_breakdown(output)
    print(f"  {infer_per_s:,.0f} infer/s, p50 {p50_us:,.0f} µs, p99 {p99_us:,.0f} µs"
          + (f"\n  server: {breakdown}" if breakdown else "")
          + (f"\n  perf_analyzer said:\n{indent(warnings)}" if warnings else ""), flush=True)
    return Measurement(protocol, concurrency, infer_per_s, p50_us, p99_us, window_ms, warnings,
                       False, windows, breakdown)


def failed(measurement: Measurement) -> Measurement:
    print(f"  perf_analyzer failed:\n{indent(measurement.problem or '')}", flush=True)
    return measurement


def indent(text: str) -> str:
    return "\n".join(f"    {line}" for line in text.splitlines())
