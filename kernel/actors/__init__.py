"""The kernel's actors, one module each: repository, control, scheduler, executor pool and
executor."""
