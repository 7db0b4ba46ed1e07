"""Reliability runs (``python -m bench.reliability.chaos``, ``soak``, ``fuzz_http``,
``fuzz_codecs``) and the pieces they share with tests/e2e/test_chaos.py and test_openapi.py:
the traffic mix (``mix_traffic``, ``mix_clients``), the faults and their classifier
(``mix_faults``, ``mix_chaos``), the measurements (``mix_measure``) and the repository they
serve (``repository``)."""
