"""The actors' addresses: the names the router delivers messages to (DESIGN, Actors).

One place for every address, so a newcomer sees here which actors exist and a typo is an
import error, not a message to nobody. Executors are named by what they serve: the CPU pool's
``executor/cpu<i>``, a GPU's ``executor/gpu<n>``, a framework kept apart
(``executor/<backend>`` or ``executor/<backend>/gpu<n>``), one model's own
(``executor/model/<model><suffix>``, kernel/actors/executor_pool/placement.py), or the server's own
process (``executor/inline``, ``--executor-inline``).
"""

from __future__ import annotations

REPOSITORY = "repository"  # reads the model repository (actors/repository.py)
CONTROL = "control"  # model lifecycle: load, unload, index, poll (actors/control.py)
SCHEDULER = "scheduler"  # queues, batching, routing to instances (actors/scheduler.py)
EXECUTORS = "executors"  # the pool: starts and supervises executors (actors/executor_pool.py)

EXECUTOR_PREFIX = "executor/"
CPU_EXECUTOR_PREFIX = "executor/cpu"
ISOLATED_PREFIX = "executor/model/"  # a model's own executors (INFERD_EXECUTOR "isolated")
INLINE_EXECUTOR = "executor/inline"


def cpu_executor(index: int) -> str:
    return f"{CPU_EXECUTOR_PREFIX}{index}"


def gpu_executor(gpu: int) -> str:
    return f"executor/gpu{gpu}"


def framework_executor(backend: str, gpu: int | None) -> str:
    """A backend kept in processes of its own (``isolate``), one per GPU it uses."""
    return f"executor/{backend}" + ("" if gpu is None else f"/gpu{gpu}")


def isolated_executor(model: str, suffix: str) -> str:
    return f"{ISOLATED_PREFIX}{model}{suffix}"


def gpu_of(address: str) -> int | None:
    """The GPU an executor's address names (``executor/gpu1``, ``executor/<backend>/gpu1``,
    ``executor/model/<model>/gpu1[/<n>]``), or ``None``: the CPU, or not an executor."""
    if address.startswith(ISOLATED_PREFIX):
        parts = address[len(ISOLATED_PREFIX):].split("/")[1:]  # past the model's name
    elif address.startswith(EXECUTOR_PREFIX):
        parts = address[len(EXECUTOR_PREFIX):].split("/")
    else:
        return None
    for part in parts:
        if part.startswith("gpu") and part[3:].isdigit():
            return int(part[3:])
    return None
