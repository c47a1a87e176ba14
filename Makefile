# One-command entry points for a fresh machine: each creates the virtual
# environment it needs.
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed
# Every package below comes from the lock, pinned exactly (scripts/lock.py writes it).
LOCK := requirements.lock
PIP_INSTALL := $(PY) -m pip install -q -c $(LOCK)
UV_INSTALL := $(VENV)/bin/uv pip install --python $(PY) -q -c $(LOCK)
NO_DEPS_ORACLES := optimum-executorch optimum accelerate psutil
# One test file per worker at a time, so module-scoped exports run once. Three workers
# on the two cores: a third keeps both busy while one waits (a Ray cluster's start, another
# worker's compile lock, a subprocess); cold, on a clean clone of this VM, 1236-1413 s
# with two workers, 1120 s with three (the cores 99% busy).
TEST_WORKERS ?= 3

.PHONY: venv test demo lint format bench lock clean conformance

$(STAMP): pyproject.toml $(LOCK)
	$(PYTHON) -m venv $(VENV)
	# pip first, for what it must find: the build tools (the project then builds without
	# isolation, so no unpinned setuptools is fetched for it), uv, and torch, which pip
	# takes from the CPU file this machine's pip configuration points at (uv reads no pip
	# configuration and would fetch a CUDA build).
	$(PIP_INSTALL) pip setuptools wheel uv torch
	# uv for the rest, from the same lock: it downloads in parallel (a cold install took
	# 5 min 20 s with pip alone, 1 min 43 s so), and keeps the torch already there.
	$(UV_INSTALL) --no-build-isolation -e '.[export,jit,llm,scale,dev,bench]'
	# optimum-executorch, a test oracle like executorch (the LLM tests run its programs),
	# pins transformers==5.0.0rc1; its export runs on the later transformers of the lock,
	# so it and optimum and accelerate go in without their requirements (each in the lock).
	$(UV_INSTALL) --no-deps $(NO_DEPS_ORACLES)
	touch $(STAMP)

venv: $(STAMP)

# One BLAS thread: tests check numbers, not speed, and OpenBLAS threads stall
# badly when the cores are shared with other jobs. numba's OpenMP threads spin briefly
# (GOMP_SPINCOUNT=1000, not the runtime's quiet-machine default): each worker's spinning
# thread would hold a core another worker runs on.
test: $(STAMP)
	OPENBLAS_NUM_THREADS=1 GOMP_SPINCOUNT=1000 $(PY) -m pytest -q -p no:cacheprovider -n $(TEST_WORKERS) --dist loadfile --durations=10 tests

demo: $(STAMP)
	$(PY) -m pyexecutorch demo

lint: $(STAMP)
	$(VENV)/bin/ruff check src tests benchmarks
	$(VENV)/bin/ruff format --check src tests benchmarks

format: $(STAMP)
	$(VENV)/bin/ruff format src tests benchmarks
	$(VENV)/bin/ruff check --fix src tests benchmarks

bench: $(STAMP)
	$(PY) benchmarks/run.py

# The official wheel's own test files for the ported APIs, imports rewritten to
# pyexecutorch, beside the official package's results (scripts/conformance.py;
# the official side is cached under .cache/conformance).
conformance: $(STAMP)
	OPENBLAS_NUM_THREADS=1 $(PY) scripts/conformance.py

# Refresh the lock on purpose: after changing a dependency in pyproject.toml, or to
# take newer releases. Run `make test` on the result and commit the two together.
lock:
	$(PYTHON) scripts/lock.py

clean:
	rm -rf $(VENV) .cache
