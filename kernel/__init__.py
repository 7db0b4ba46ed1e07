"""The inferd microkernel: actor runtime, router, supervisor, plugin manager, hookspecs,
settings, CLI, and the actors (repository, control, scheduler, executor)."""
