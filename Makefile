# Two commands do everything on a fresh machine: `make train` and `make test`.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
PIP_CONSTRAINT := constraints-cpu.txt

.PHONY: train test test-slow lint bench setup clean

setup: $(STAMP)

$(STAMP): pyproject.toml $(PIP_CONSTRAINT)
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip
	$(BIN)/python -m pip install -q -c $(PIP_CONSTRAINT) torch
	$(BIN)/python -m pip install -q -c $(PIP_CONSTRAINT) -e '.[dev]'
	touch $(STAMP)

train: $(STAMP)
	$(BIN)/rlxf train $(ARGS)

test: $(STAMP)
	$(BIN)/python -m pytest -q -p no:cacheprovider $(PYTEST_ARGS)

test-slow: $(STAMP)
	$(BIN)/python -m pytest -q -p no:cacheprovider -m slow $(PYTEST_ARGS)

lint: $(STAMP)
	$(BIN)/ruff check src tests benchmarks

clean:
	rm -rf $(VENV) runs
