"""Process resource limits that ``inferd serve`` adjusts at start-up: the open-file limit.

Owns raising the soft ``RLIMIT_NOFILE`` to the hard limit (every client connection, executor
pipe, model file and zmq socket is a descriptor, and the usual soft default of 1,024 is far
below what a server holding keep-alive connections needs), reading the result, and the share
of it each frontend's connection cap defaults to (``default_connection_cap``), so that one
protocol's clients can never take the descriptors another's need. It never lowers a limit and
never fails start-up: a limit it cannot raise is logged and kept.
"""

from __future__ import annotations

import logging
import resource

__all__ = ["default_connection_cap"]

log = logging.getLogger(__name__)

# Linux refuses an infinite RLIMIT_NOFILE (it must not exceed fs.nr_open, 1,048,576 by
# default); this is the value tried when the hard limit is unlimited.
UNLIMITED_FALLBACK = 1 << 20

# The open-file limit split between the frontends' connections: HTTP half, gRPC a quarter, the
# last quarter left to metrics, zmq, executors and model files. Past the ceiling the
# connections' memory matters more than their descriptors.
CONNECTION_SHARES = {"http": 2, "grpc": 4}  # protocol -> the divisor of the limit
MAX_CONNECTIONS_CEILING = 16384


def open_file_limit() -> int:
    """The soft open-file limit now in force (``UNLIMITED_FALLBACK`` if it is unlimited)."""
    soft, _ = resource.getrlimit(resource.RLIMIT_NOFILE)
    return UNLIMITED_FALLBACK if soft == resource.RLIM_INFINITY else soft


def default_connection_cap(protocol: str) -> int:
    """The default most open connections of ``protocol``'s frontend ("http" or "grpc"): its
    share of the open-file limit now in force, at most ``MAX_CONNECTIONS_CEILING``."""
    return max(1, min(open_file_limit() // CONNECTION_SHARES[protocol], MAX_CONNECTIONS_CEILING))


def raise_open_file_limit() -> int:
    """Raise the soft open-file limit to the hard one; return the soft limit in force after."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    target = UNLIMITED_FALLBACK if hard == resource.RLIM_INFINITY else hard
    if soft != resource.RLIM_INFINITY and soft < target:
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))
        except (OSError, ValueError) as error:
            log.warning("cannot raise the open-file limit from %d to %d: %s", soft, target, error)
        else:
            log.debug("raised the open-file limit from %d to %d", soft, target)
    return open_file_limit()
