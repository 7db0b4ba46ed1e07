"""The built-in response caches (Triton's cache names): ``local`` (this process's memory) and
``redis`` (a Redis server), each a plugin module registered by its own entry point."""
