"""Built-in frontend plugins: each subpackage adapts one wire protocol to the data plane.

A subpackage's ``__init__`` is its hook module and imports only the kernel's registration
types; the protocol code lives in sibling modules that are imported when the server starts
that frontend. Nothing here holds server logic: that belongs to the data plane.
"""
