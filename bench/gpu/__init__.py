"""The GPU check: ``bench/gpu_check.sh`` installs what the GPU machine lacks
(``install_tree``, ``wheels.txt``) and runs ``check``, whose checks are in ``parts`` (through
a server) and ``device`` (CUDA in the check's own process)."""
