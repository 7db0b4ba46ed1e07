"""The servers the peers bench measures, each started for one turn and stopped after it:
inferd (``simple``, ``mlp`` and ``identity_fp32`` loaded; or the inferd of another
interpreter with ``--before-python``), and real Triton serving the twin repository.

Owns the command lines and the readiness waits; it measures nothing and sets nothing up
(``peer_setup`` does).
"""
from __future__ import annotations

import argparse
import json
import urllib.request
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path

from bench.common import serving
from bench.performance.peer_setup import (
    MODELS,
    REPOSITORY,
    ROOT,
    START_TIMEOUT_SECS,
    STOP_TIMEOUT_SECS,
    TWIN_REPOSITORY,
    Triton,
)


@contextmanager
def running_peer(
    command: Sequence[str], ports: dict[str, int], *, name: str, models: Sequence[str],
    via: str, log: Path, environment: dict[str, str] | None = None,
) -> Iterator[serving.Server]:
    server = serving.start_process(command, ports, log=log, environment=environment,
                                   name=name, cwd=ROOT)
    try:
        for model in models:
            serving.wait_model_ready(server, model, via=via, timeout=START_TIMEOUT_SECS)
        yield server
    finally:
        serving.stop_process(server.process, grace=STOP_TIMEOUT_SECS)


@contextmanager
def running_inferd(
    args: argparse.Namespace, folder: Path, *flags: str, python: str = ""
) -> Iterator[serving.Server]:
    loads = [option for model in MODELS for option in ("--load-model", model)]
    extra = args.before_args if python and args.before_args is not None else args.server_args
    # The shm point's regions; a before server that knows the flag is given it by --before-args.
    own = () if python else ("--allow-client-shm=true",)
    every = ["--model-control-mode", "explicit", *loads, *own, *flags, *extra]
    log = folder / f"inferd{'-before' if python else ''}.log"
    # Not in ROOT: the executors' sys.path starts with their working directory, where this
    # checkout's inferd.egg-info would give another checkout's server these entry points.
    with serving.running(REPOSITORY, *every, log=log, model=MODELS[0],
                         via="http", cwd=folder, timeout=START_TIMEOUT_SECS,
                         grace=STOP_TIMEOUT_SECS, prefix=args.server_prefix,
                         python=python) as server:
        for model in MODELS[1:]:
            serving.wait_model_ready(server, model, via="http", timeout=START_TIMEOUT_SECS)
        yield server


@contextmanager
def running_triton(
    triton: Triton, args: argparse.Namespace, folder: Path
) -> Iterator[serving.Server]:
    ports = {"http": serving.free_port(), "grpc": serving.free_port()}
    tritonserver = triton.binary.parent.parent
    command = [*args.server_prefix, str(triton.binary),
               f"--model-repository={TWIN_REPOSITORY}",
               f"--backend-directory={tritonserver / 'backends'}",
               f"--cache-directory={tritonserver / 'caches'}",
               "--model-control-mode=explicit", *(f"--load-model={model}" for model in MODELS),
               "--http-address=127.0.0.1", f"--http-port={ports['http']}",
               "--grpc-address=127.0.0.1", f"--grpc-port={ports['grpc']}",
               "--allow-metrics=false"]
    with running_peer(command, ports, name="tritonserver", models=MODELS, via="http",
                      log=folder / "triton.log", environment=triton.environment) as server:
        yield server


def server_version(server: serving.Server) -> str:
    try:
        with urllib.request.urlopen(f"http://{server.address('http')}/v2", timeout=5) as reply:
            return str(json.load(reply).get("version", "?"))
    except (OSError, ValueError):
        return "?"
