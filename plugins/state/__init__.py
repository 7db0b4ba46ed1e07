"""The built-in stores of ``--model-control-state``'s desired-state record: ``path`` (a local or
shared POSIX file under a lock) and ``s3`` (compare-and-swap with conditional writes), each a
plugin module registered by its own entry point."""
