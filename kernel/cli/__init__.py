"""The ``inferd`` command: its entry point (``main``), ``serve`` and its flag types (``serve``,
``flags``), ``check``, and the typer app of the client commands (``app``). Plugins add client
commands through the registry of ``commands``."""
