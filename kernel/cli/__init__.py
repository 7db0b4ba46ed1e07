"""The ``inferd`` command: its entry point (``main``), ``serve``, ``check``, and the typer app
of the client commands (``app``). Plugins add client commands through the SDK's registry
(``inferd.kernel.sdk.commands``), whose flag types (``inferd.kernel.sdk.flags``) ``serve``
uses too."""
