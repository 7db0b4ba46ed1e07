"""The control actor (``actor``): the model lifecycle, the control modes and the repository API,
with the objects it owns and calls (``versions``, ``unload``, ``poll``, ``recovery``, ``views``,
``ensembles``, ``startup``), the status it keeps of every model (``model_status``, logged by
``lifecycle_log``), and the policies plugins add (``policies``: models on demand and the memory
budget, the control-state record of ``--model-control-state``)."""
