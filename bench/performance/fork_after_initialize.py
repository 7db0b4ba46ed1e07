"""The memory of ``count: 4`` python instances holding one large weight, each in a process that
ran ``initialize`` itself (Triton's way, and inferd's default) against instances forked from
the first one after its ``initialize`` (``INFERD_FORK_AFTER_INITIALIZE: "true"``).

The model is tests/plugins/python_models/shared_weights: ``initialize`` fills a float64 array
of ``--weight-mb`` megabytes (every page written), and each instance writes its pid in the
model folder. For each mode a server starts, a few requests go to every instance, and the
table gives, summed over the instances' processes, the resident set (RSS: shared pages count
in every process that maps them) and the proportional set (PSS: a shared page counts 1/n in
each of its n processes, so the sum is what the machine really holds), both from
/proc/<pid>/smaps_rollup, and the load time. A script, not a test: the figures depend on the
machine and its Python.

    .venv/bin/python -m bench.performance.fork_after_initialize [--weight-mb 200] [--instances 4]
"""

from __future__ import annotations

import argparse
import re
import shutil
import time
from pathlib import Path

import numpy as np
import tritonclient.http as httpclient

from bench.common import serving

ROOT = Path(__file__).resolve().parents[2]
MODEL = "shared_weights"
SOURCE = ROOT / "tests" / "plugins" / "python_models" / MODEL
FORK_LINE = 'parameters { key: "INFERD_FORK_AFTER_INITIALIZE" value { string_value: "true" } }'


def write_model(repository: Path, weight_mb: float, instances: int, fork: bool) -> Path:
    folder = repository / MODEL
    shutil.copytree(SOURCE, folder)
    config = folder / "config.pbtxt"
    text = config.read_text()
    text = text.replace('string_value: "200"', f'string_value: "{weight_mb:g}"')
    text = text.replace("count: 4", f"count: {instances}")
    if not fork:
        text = text.replace(FORK_LINE + "\n", "")
    config.write_text(text)
    return folder


def memory_kb(pid: int) -> tuple[int, int]:
    """(RSS, PSS) of ``pid`` in kB."""
    text = Path(f"/proc/{pid}/smaps_rollup").read_text()
    rss = re.search(r"^Rss:\s+(\d+) kB", text, re.MULTILINE)
    pss = re.search(r"^Pss:\s+(\d+) kB", text, re.MULTILINE)
    assert rss is not None and pss is not None
    return int(rss.group(1)), int(pss.group(1))


def measure(weight_mb: float, instances: int, fork: bool) -> tuple[float, float, float]:
    """(RSS MB, PSS MB, seconds to ready) of one server's instances."""
    with serving.temporary_folder("inferd-fork-bench-") as folder:
        repository = folder / "repository"
        model = write_model(repository, weight_mb, instances, fork)
        started = time.monotonic()
        with serving.running(repository, log=folder / "server.log", model=MODEL,
                             via="http") as server:
            ready = time.monotonic() - started
            with httpclient.InferenceServerClient(server.address("http")) as client:
                for value in range(4 * instances):
                    tensor = httpclient.InferInput("IN", [1], "INT32")
                    tensor.set_data_from_numpy(np.array([value], np.int32))
                    client.infer(MODEL, [tensor])
            pids = [int(path.name) for path in (model / "pids").glob("*")]
            assert len(pids) == instances, pids
            rss = pss = 0
            for pid in pids:
                process_rss, process_pss = memory_kb(pid)
                rss += process_rss
                pss += process_pss
    return rss / 1024, pss / 1024, ready


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--weight-mb", type=float, default=200.0)
    parser.add_argument("--instances", type=int, default=4)
    options = parser.parse_args()
    rows = []
    for label, fork in (("a process each (default)", False),
                        ("forked after initialize", True)):
        rss, pss, ready = measure(options.weight_mb, options.instances, fork)
        rows.append((label, rss, pss, pss / options.weight_mb, ready))
    print(f"count: {options.instances}, weight {options.weight_mb:g} MB "
          "(RSS and PSS summed over the instances' processes)")
    print(f"{'instances':<26} {'RSS MB':>8} {'PSS MB':>8} {'PSS/weight':>11} {'ready s':>8}")
    for label, rss, pss, ratio, ready in rows:
        print(f"{label:<26} {rss:>8.0f} {pss:>8.0f} {ratio:>10.2f}x {ready:>8.1f}")
    print(f"forked / default PSS: {rows[1][2] / rows[0][2]:.2f}")


if __name__ == "__main__":
    main()
