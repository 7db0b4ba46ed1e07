"""The kernel's actors, one package each: repository, control, scheduler, executor pool and
executor; each package holds its actor (``actor.py``) and the helpers only that actor uses."""
