"""The control actor (``actor``): the model lifecycle, the control modes and the repository API,
with the objects it owns and calls (``versions``, ``unload``, ``poll``, ``recovery``, ``views``,
``ensembles``), the status it keeps of every model (``model_status``, logged by ``lifecycle_log``),
and the desired state of ``--model-control-state`` (``desired_state``: what it means to a replica;
``desired_state_record``: the record and its stores)."""
