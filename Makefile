# `make serve` and `make test` work on a fresh machine: they create .venv and install
# inferd with what they need on first use (and again whenever pyproject.toml changes).

PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
EXTRAS ?= onnx,test,redis,s3
# The pytorch backend's framework (its tests need it). torch is installed first and pinned
# so pip takes the CPU wheel; an unpinned torch pulls a multi-GB CUDA build. WITH_TORCH=0
# leaves it out (the pytorch models are then UNAVAILABLE and their tests skipped).
WITH_TORCH ?= 1
TORCH_PIN := torch==2.13.0
# The tensorflow backend's framework, the CPU build (tensorflow-cpu; its tests need it).
# WITH_TF=0 leaves it out (the TensorFlow models are then UNAVAILABLE and their tests skipped).
WITH_TF ?= 1
PYTEST_ARGS ?=
comma := ,

.PHONY: setup serve test test-http-uvicorn lint docs architecture bench bench-compiled models clean gpu-wheels

$(VENV)/.installed: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	if [ "$(WITH_TORCH)" = 1 ]; then $(PY) -m pip install --quiet "$(TORCH_PIN)"; fi
	# Not compiled here: the next step does it in place, with the venv's mypy.
	INFERD_COMPILE=0 $(PY) -m pip install --quiet -e ".[$(EXTRAS)$(if $(filter 1,$(WITH_TORCH)),$(comma)torch)$(if $(filter 1,$(WITH_TF)),$(comma)tensorflow)]"
	touch $@

# The compiled request path (setup.py's COMPILED, with mypyc), built in place and rebuilt
# whenever a source under kernel/ or protocols/ is newer; setup.py does nothing when its
# manifest still matches the compiled sources. Should the build fail, the code runs as pure
# Python (inferd.protocols.build), and so it does with INFERD_COMPILE=0.
COMPILE_INPUTS := $(wildcard kernel/*.py kernel/*/*.py kernel/*/*/*.py protocols/*.py protocols/*/*.py)

$(VENV)/.compiled: $(VENV)/.installed setup.py $(COMPILE_INPUTS)
	$(PY) setup.py --quiet build_ext --inplace
	touch $@

setup: $(VENV)/.compiled

serve: setup
	$(VENV)/bin/inferd serve --model-repository model_repository

# pytest's exit code is kept in .pytest-rc so .ci/run can tell "no tests" (5) from failures.
test: setup
	@$(PY) -m pytest $(PYTEST_ARGS); rc=$$?; echo $$rc > .pytest-rc; exit $$rc

# The suites that speak HTTP, again on the uvicorn server (--http-implementation uvicorn; the
# default is the loop server, which `make test` runs). .ci/run runs both.
HTTP_SUITES := tests/e2e/test_kserve_http.py tests/e2e/test_http_hostile.py \
	tests/e2e/test_connection_limits.py tests/e2e/test_tls.py tests/e2e/test_restricted_apis.py \
	tests/e2e/test_openapi.py tests/e2e/test_shared_memory.py \
	tests/e2e/test_shared_memory_access.py tests/e2e/test_logging_extension.py \
	tests/e2e/test_trace.py tests/e2e/test_decoupled.py tests/e2e/test_cancellation.py \
	tests/e2e/test_hostile_repository_api.py tests/e2e/test_unknown_model_answers.py
test-http-uvicorn: setup
	INFERD_TEST_HTTP_IMPLEMENTATION=uvicorn $(PY) -m pytest $(HTTP_SUITES)

# ruff, and mypy --strict over kernel/ and protocols/ (also run by the tests: tests/test_typecheck.py).
lint: setup
	PYTHON=$(PY) .ci/typecheck

# docs/architecture.md's source tree, generated from the packages and their docstrings
# (tests/test_docs.py fails while it is stale).
architecture:
	python3 docs/source_tree.py

# The documentation site: docs/ (mkdocs.yml) built into site/, which git ignores. --strict
# turns every warning (a broken link or anchor, a page left out of the navigation) into a
# failure. Only the docs extra is installed (read from pyproject.toml), not inferd itself, so
# this stays quick on a fresh clone and in CI.
DOCS_INSTALLED := $(VENV)/.docs-installed

$(DOCS_INSTALLED): pyproject.toml
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -c 'import tomllib; print("\n".join(tomllib.load(open("pyproject.toml", "rb"))["project"]["optional-dependencies"]["docs"]))' > $(VENV)/docs-requirements.txt
	$(PY) -m pip install --quiet -r $(VENV)/docs-requirements.txt
	touch $@

docs: $(DOCS_INSTALLED)
	$(PY) -m mkdocs build --strict

bench: setup
	$(PY) bench/bench_wire.py

# Each step of a request timed pure Python against the compiled build (bench/bench_compiled.py).
bench-compiled: setup
	$(PY) bench/bench_compiled.py

bench-kserve: setup
	$(PY) bench/bench_kserve.py

# 1, 2 and 3 replicas behind Debian's nginx (apt-get install nginx), and one direct.
bench-replicas: setup
	$(PY) bench/bench_replicas.py

# The wheels bench/gpu_check.sh installs offline on the GPU machine (Python 3.12, manylinux
# x86_64; bench/gpu_wheels.txt lists them): into .whl/, which git ignores and a device run
# carries. Any Python with pip downloads them; nothing is installed here.
GPU_PLATFORMS := $(foreach n,5 17 24 26 27 28,--platform manylinux_2_$(n)_x86_64) \
	--platform manylinux2014_x86_64 --platform manylinux1_x86_64
gpu-wheels:
	rm -rf .whl && mkdir -p .whl
	$(PYTHON) -m pip download --quiet --no-deps --only-binary=:all: --python-version 3.12 \
		--implementation cp $(GPU_PLATFORMS) -d .whl -r bench/gpu_wheels.txt
	@ls -l .whl | tail -n +2 | awk '{printf "%10d  %s\n", $$5, $$9}'
	@du -cb .whl/*.whl | tail -1 | awk '{printf "%d wheels, %.1f MiB\n", n, $$1 / 1048576}' n=$$(ls .whl | wc -l)

models: setup
	$(PY) model_repository/generate.py

clean:
	rm -rf $(VENV) .pytest-rc .pytest_cache .hypothesis build site protocols/compiled.json
	find kernel protocols -name '*.so' -delete
