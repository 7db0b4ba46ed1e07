# `make serve` and `make test` work on a fresh machine: they create .venv and install
# inferd with what they need on first use (and again whenever pyproject.toml changes).

PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
EXTRAS ?= onnx,test
# Set WITH_TORCH=1 to add the torch backend's framework; torch must be installed first and
# pinned, or pip pulls a multi-GB CUDA build.
WITH_TORCH ?= 0
PYTEST_ARGS ?=

.PHONY: setup serve test bench models clean

$(VENV)/.installed: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	if [ "$(WITH_TORCH)" = 1 ]; then $(PY) -m pip install --quiet torch==2.13.0; fi
	$(PY) -m pip install --quiet -e ".[$(EXTRAS)]"
	touch $@

setup: $(VENV)/.installed

serve: setup
	$(VENV)/bin/inferd serve --model-repository model_repository

# pytest's exit code is kept in .pytest-rc so .ci/run can tell "no tests" (5) from failures.
test: setup
	@$(PY) -m pytest $(PYTEST_ARGS); rc=$$?; echo $$rc > .pytest-rc; exit $$rc

bench: setup
	$(PY) bench/bench_wire.py

bench-kserve: setup
	$(PY) bench/bench_kserve.py

models: setup
	$(PY) model_repository/generate.py

clean:
	rm -rf $(VENV) .pytest-rc .pytest_cache .hypothesis
