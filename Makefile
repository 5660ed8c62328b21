# Two commands: `make repro` (set up, then rebuild every artifact with DVC) and `make test`.
VENV   ?= .venv
PYTHON ?= python3
BIN    := $(abspath $(VENV))/bin
export PATH := $(BIN):$(PATH)

.PHONY: setup repro test clean-venv

setup: $(VENV)/.installed
	$(BIN)/compress link-sources  # queued experiments (.dvc/tmp/exps) see ../shared like the checkout

# torch first and pinned: the project machines carry its CPU wheel, and a loose
# requirement would make pip download a multi-GB CUDA build.
$(VENV)/.installed: pyproject.toml constraints.txt
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -c constraints.txt torch==2.13.0
	$(BIN)/python -m pip install -c constraints.txt -e ".[dev]"
	touch $@

repro: setup
	dvc repro
	compress report reports/comparison.json --readme README.md

# Two workers, one test file at a time (module fixtures built once), longest files first
# (tests/conftest.py): a lone pytest keeps about one of the two cores busy (imports, dvc,
# subprocess start-ups between tiny-model steps).
TEST_WORKERS ?= 2
test: setup
	python -m pytest -n $(TEST_WORKERS) --dist loadfile --no-loadscope-reorder

clean-venv:
	rm -rf $(VENV)
