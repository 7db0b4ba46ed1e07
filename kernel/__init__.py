"""The inferd microkernel: actor runtime, router, supervisor, plugin manager, the plugin SDK,
settings, CLI, and the actors (repository, control, scheduler, executor)."""

import os

# Before anything imports grpc: gRPC's fork handlers run in every child forked while gRPC
# threads are busy, and in the moment before an executor process execs they can abort it
# (SIGABRT in ev_epoll1, seen under chaos). inferd's children always exec, so the handlers
# have nothing to protect.
os.environ.setdefault("GRPC_ENABLE_FORK_SUPPORT", "false")

# The compiled request path's guard (inferd.protocols.build) runs before any kernel module is
# imported, since the kernel's compiled modules belong to the same mypyc group.
import inferd.protocols  # noqa: E402, F401
