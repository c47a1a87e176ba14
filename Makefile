# One-command entry points for a fresh machine: each creates the virtual
# environment it needs.
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed

.PHONY: venv test demo lint format bench clean

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	# torch is pinned to the CPU build that the export extra names exactly.
	$(PY) -m pip install -q -e '.[export,dev]'
	touch $(STAMP)

venv: $(STAMP)

# One BLAS thread: tests check numbers, not speed, and OpenBLAS threads stall
# badly when the cores are shared with other jobs.
test: $(STAMP)
	OPENBLAS_NUM_THREADS=1 $(PY) -m pytest -q -p no:cacheprovider tests

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

clean:
	rm -rf $(VENV) .cache
