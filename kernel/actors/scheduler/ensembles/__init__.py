"""Ensembles (SPEC 4) as the scheduler serves them.

``planning`` turns an ensemble config into the order its steps may run in (pure; control and
``inferd check`` use it too); ``served`` and ``pinning`` are what the scheduler keeps of a served
ensemble and the versions one request runs on; ``running`` runs one request (its cache, its
stream, its warm-up) and ``steps`` its dataflow through the composing models; ``inflight``
limits the requests at each step (``max_inflight_requests``) and ``warming`` runs an ensemble's
``model_warmup`` through its pipeline. Control's part (loading, serving, unloading an ensemble,
and which ensembles use which models) is ``inferd.kernel.actors.control.ensembles`` and
``inferd.kernel.actors.control.ensemble_dependencies``."""
