"""inferd's built-in plugins: backends and frontends, one folder each.

They are registered through the ``inferd`` entry-point group exactly like third-party plugins,
so nothing in the kernel names them. This package holds no code of its own.
"""
