"""inferd's measurements and long-running checks, run from the repository root as modules
(``python -m bench.performance.peers --quick``), never by the test suite except through the
few helpers its tests share:

- ``bench.performance``: figures and ratios (latency, throughput, CPU, memory, instructions),
  against Triton where it has the feature;
- ``bench.reliability``: chaos, soak and fuzzing runs, and the traffic mix and fault
  classifiers that ``tests/e2e/test_chaos.py`` shares;
- ``bench.gpu``: the GPU check that ``bench/gpu_check.sh`` runs on the GPU machine;
- ``bench.common``: starting servers (``serving``, built on ``inferd.kernel.sdk.testing``, the
  launcher the tests use too) and replicas behind nginx (``replica_harness``).
"""
