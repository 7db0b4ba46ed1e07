"""inferd's built-in plugins, one folder per kind: backends, frontends, response caches,
trace sinks, repository storage, control-state stores, the client commands, repository agents.

They are registered through the ``inferd`` entry-point group exactly like third-party plugins,
so nothing in the kernel names them, and they import the kernel only through
``inferd.kernel.sdk``. This package holds no code of its own.
"""
