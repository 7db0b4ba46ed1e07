"""Which model instance the code on a thread belongs to, for ``triton_python_backend_utils``.

Triton gives every python model instance a process of its own, so its utility module can reach
"the server" and "the model folder" through process globals. inferd runs many instances in one
executor process, so the backend binds an ``InstanceScope`` to the thread that runs an
instance's ``initialize``, ``execute`` and ``finalize``; BLS calls and ``get_model_dir`` read it
from there. Threads the model starts itself fall back to the scope of the latest instance
loaded in this process (every scope of one executor reaches the same server). Owns that binding
only: no I/O, no knowledge of tensors.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass

from inferd.protocols.errors import InferdError
from inferd.protocols.messages import InferRequest, InferResponse

ServerInfer = Callable[[InferRequest, "float | None"], InferResponse]
ServerInferStream = Callable[[InferRequest, "float | None"],
                             Iterator["InferResponse | InferdError"]]


@dataclass(frozen=True, slots=True)
class InstanceScope:
    """What one instance's code may reach: ``infer`` sends a request to any model of the server
    (``None`` when the instance was loaded without a server, as in direct backend tests), and
    ``model_dir`` is the version folder holding its ``model.py``."""

    infer: ServerInfer | None
    model_dir: str
    infer_stream: ServerInferStream | None = None  # for BLS calls with decoupled=True


_local = threading.local()
_process_default: InstanceScope | None = None


@contextmanager
def bound(scope: InstanceScope) -> Iterator[None]:
    """Bind ``scope`` to the current thread for the duration of the block."""
    previous = getattr(_local, "scope", None)
    _local.scope = scope
    try:
        yield
    finally:
        _local.scope = previous


def set_process_default(scope: InstanceScope) -> None:
    """Make ``scope`` the one threads without a binding of their own use."""
    global _process_default
    _process_default = scope


def current() -> InstanceScope | None:
    """The scope bound to this thread, else the process default, else ``None``."""
    scope: InstanceScope | None = getattr(_local, "scope", None)
    return scope if scope is not None else _process_default
