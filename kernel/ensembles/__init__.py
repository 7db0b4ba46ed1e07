"""Ensembles (SPEC 4): models whose steps run other models.

``planning`` turns an ensemble config into the order its steps may run in (pure);
``dependencies`` is control's record of which ensembles use which models (pure);
``control`` is what loading, serving and unloading an ensemble mean to the control actor;
``served`` and ``pinning`` are what the scheduler keeps of a served ensemble and the versions
one request runs on; ``running`` runs one request's dataflow through the composing models.
"""
