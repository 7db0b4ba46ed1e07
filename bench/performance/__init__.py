"""Benchmarks: each module a script (``python -m bench.performance.<name> --help``) printing
a table of figures and ratios; what each measures is its docstring and docs/testing.md."""
