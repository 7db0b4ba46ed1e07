"""The ids an executor gives its instances, unique over every process an executor name has had.

A scheduler addresses an instance as (executor name, id), and a name outlives its process: a
restarted executor answers to the same name. So an id carries its process's incarnation (the
pid and a few random bits, against a pid used again) above a counter of that process's own;
a batch sent to an instance of an earlier process can never run on an instance of this one,
and is refused (``stale_instance``) as the retryable error of an executor that died. It knows
nothing of instances themselves.
"""

from __future__ import annotations

import itertools
import os
import secrets

from inferd.protocols.errors import ExecutorCrashed

_COUNTER_BITS = 32  # instances of one process: its own count, from 1
_NONCE_BITS = 8  # so a pid taken again by the next process still differs
# Random per process; each executor started in it (tests start several) takes the next.
_nonces = itertools.count(secrets.randbits(_NONCE_BITS))


def process_incarnation() -> int:
    """A new incarnation of this process: its pid and a nonce of its own."""
    nonce = next(_nonces) & ((1 << _NONCE_BITS) - 1)
    return os.getpid() << _NONCE_BITS | nonce


def new_instance_id(incarnation: int, number: int) -> int:
    """The id of an incarnation's ``number``-th instance (from 1)."""
    return incarnation << _COUNTER_BITS | number


def incarnation_of(instance: int) -> int:
    return instance >> _COUNTER_BITS


def number_of(instance: int) -> int:
    """Which of its process's instances it is (from 1): its name in thread names."""
    return instance & ((1 << _COUNTER_BITS) - 1)


def stale_instance(instance: int, model: str, executor: str) -> ExecutorCrashed:
    """The refusal of a batch for ``instance``, which an earlier process of ``executor``
    loaded: that process is gone, the model is being loaded again in this one."""
    pid = incarnation_of(instance) >> _NONCE_BITS
    return ExecutorCrashed(
        f"instance {instance} of '{model}' was loaded by executor process {executor} "
        f"(pid {pid}), which exited; it is being restarted")
