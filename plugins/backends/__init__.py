"""Built-in backend plugins, one folder each.

Each folder's ``__init__`` is a hook module that registers its backend by import path and
imports no framework; the framework is imported only inside an executor, when a model needs it.
"""
