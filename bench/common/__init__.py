"""What the bench packages share: starting servers (``serving``) and replicas behind nginx
(``replica_harness``, which tests/e2e/test_replicas.py uses too)."""
