"""Triton's ``ModelConfig``: reading it (``reading``: parse, fill in defaults, print), its rules
(``validation``, with an ensemble's dataflow graph in ``ensemble_graph``), what inferd
honours of it (``support``), and its ``sequence_batching`` section (``sequence_plan``). No actor:
what a load, ``inferd check`` and the backends call. Completing a config from a model file is
the SDK's (``inferd.kernel.sdk.modelconfig``)."""
