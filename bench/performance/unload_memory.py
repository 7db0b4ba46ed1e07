"""Memory given back on unload (issue 37): a model of 100 MiB of weights (50 layers of 2 MiB,
``tests/e2e/large_models.py``) loaded and unloaded ``--cycles`` times through tritonclient's
``load_model``/``unload_model`` (EXPLICIT mode), per model kind (ONNX, TorchScript) and
placement:

``in-process``
    the default: onnxruntime and pytorch instances run in the server's own process;
``process``
    ``--cpu-executor process``: in the CPU executor process, which stays when its models go;
``isolated``
    ``INFERD_EXECUTOR: "isolated"``: in a process of the model's own, which ends at unload.

The table gives the resident memory of the server and every process below it (``/proc``),
at start, after the first load, after the first unload and after the last one, the growth
over the cycles after the first (what a leak would show), and what the server reported for
the last unload (the index's ``memory``, also ``inferd_model_unload_*_bytes`` and a log
line): what the load took and what the unload gave back. A script, not a test: on a shared
machine the numbers move by a few MiB.

    .venv/bin/python -m bench.performance.unload_memory [--cycles 30] [--models onnx,torchscript]
"""

from __future__ import annotations

import argparse
import json
import sys
import urllib.request
from pathlib import Path

import numpy as np
import tritonclient.http as httpclient

from bench.common import serving
from inferd.kernel.sdk.memory_meter import resident_bytes
from tests.e2e.large_models import INPUTS, SIDE, WEIGHT_BYTES, WRITERS

ROOT = Path(__file__).resolve().parents[2]

PLACEMENTS = {
    "in-process": ((), ""),
    "process": (("--cpu-executor", "process"), ""),
    "isolated": ((), 'parameters { key: "INFERD_EXECUTOR" value { string_value: "isolated" } }\n'),
}
MIB = 1 << 20


def index_memory(server: serving.Server, name: str) -> dict[str, int]:
    url = f"http://127.0.0.1:{server.ports['http']}/v2/repository/index"
    request = urllib.request.Request(url, data=b"{}", method="POST")
    with urllib.request.urlopen(request, timeout=30) as response:
        rows = json.loads(response.read())
    return next((row.get("memory", {}) for row in rows if row["name"] == name), {})


def measure(kind: str, placement: str, cycles: int, folder: Path) -> list[str]:
    flags, parameter = PLACEMENTS[placement]
    repository = folder / f"{kind}-{placement}"
    repository.mkdir()
    model = WRITERS[kind](repository, "large")
    with (model / "config.pbtxt").open("a") as config:
        config.write(parameter)
    server = serving.start(repository, "--model-control-mode", "explicit", *flags,
                           log=folder / f"{kind}-{placement}.log")
    client = httpclient.InferenceServerClient(f"127.0.0.1:{server.ports['http']}",
                                              network_timeout=300.0)
    try:
        serving.wait_ready(server, lambda: _ready(client))
        pid = server.process.pid
        start = resident_bytes(pid) or 0
        after_load = after_unload = 0
        for cycle in range(cycles):
            client.load_model("large")
            values = httpclient.InferInput(INPUTS[kind], [1, SIDE], "FP32")
            values.set_data_from_numpy(np.ones((1, SIDE), np.float32))
            client.infer("large", [values])
            if cycle == 0:
                after_load = resident_bytes(pid) or 0
            client.unload_model("large")
            if cycle == 0:
                after_unload = resident_bytes(pid) or 0
            print(f"  {kind} {placement}: cycle {cycle + 1}/{cycles}", file=sys.stderr)
        end = resident_bytes(pid) or 0
        reported = index_memory(server, "large")
    finally:
        client.close()
        serving.stop_process(server.process)
    return [kind, placement, f"{start / MIB:.0f}", f"{after_load / MIB:.0f}",
            f"{after_unload / MIB:.0f}", f"{end / MIB:.0f}",
            f"{(end - after_unload) / MIB:+.0f}",
            f"{reported.get('loaded_resident_bytes', 0) / MIB:.0f}",
            f"{reported.get('returned_resident_bytes', 0) / MIB:.0f}"]


def _ready(client: httpclient.InferenceServerClient) -> bool:
    try:
        return bool(client.is_server_ready())
    except Exception:  # not listening yet
        return False


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cycles", type=int, default=30)
    parser.add_argument("--models", default="onnx,torchscript")
    parser.add_argument("--placements", default=",".join(PLACEMENTS))
    arguments = parser.parse_args()
    header = ["model", "placement", "start MiB", "1st load", "1st unload",
              f"after {arguments.cycles}", "growth", "load took", "unload returned"]
    rows = [header]
    with serving.temporary_folder("unload-memory-") as folder:
        for kind in arguments.models.split(","):
            for placement in arguments.placements.split(","):
                rows.append(measure(kind, placement, arguments.cycles, folder))
    print(f"weights: {WEIGHT_BYTES / MIB:.0f} MiB per model; resident memory of the server's "
          "process tree; 'growth': after the last unload minus after the first; the last two "
          "columns: what the server reported for the last unload")
    widths = [max(len(row[i]) for row in rows) for i in range(len(header))]
    for row in rows:
        print("  ".join(cell.rjust(width) for cell, width in zip(row, widths, strict=True)))


if __name__ == "__main__":
    main()
