"""What the bench packages share: starting servers (``serving``), timing a step on the
compiled build beside its pure-Python source (``pure_or_compiled``), and replicas
(``replica_harness``) behind a real nginx (``replica_nginx``) under a steady client load
(``steady_load``), which tests/e2e/test_replicas.py uses too."""
