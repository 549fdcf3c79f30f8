# Two commands do everything on a fresh machine: `make train` and `make test`.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
PIP_CONSTRAINT := constraints-cpu.txt

.PHONY: train test test-slow lint bench setup clean chromium

setup: $(STAMP)

$(STAMP): pyproject.toml $(PIP_CONSTRAINT)
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip
	$(BIN)/python -m pip install -q -c $(PIP_CONSTRAINT) torch
	$(BIN)/python -m pip install -q -c $(PIP_CONSTRAINT) -e '.[dev]'
	$(MAKE) chromium
	touch $(STAMP)

# The studio's browser tests drive Debian's Chromium (Playwright never downloads a browser here). Where apt
# is missing this step only warns, and the browser tests then fail unless RLXF_SKIP_BROWSER_TESTS=1.
chromium:
	@command -v chromium >/dev/null 2>&1 || ( command -v apt-get >/dev/null 2>&1 && \
	  (apt-get update -q && DEBIAN_FRONTEND=noninteractive apt-get install -y -q chromium) ) || \
	  echo "warning: no chromium (and no apt-get to install it): tests/studio browser tests will fail"

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

# Mutation check of the core numeric code (tools/mutation_check.py; docs/testing.md): every mutant of
# algos/, train/micro_batches.py, train/ppo_batches.py and loops/rl.py against its fast tests. Tens of
# minutes in full; MUTATION_ARGS="--modules 'algos/kl.py' --sample 20" runs a part.
.PHONY: mutation
mutation: $(STAMP)
	nice -n 5 $(BIN)/python tools/mutation_check.py $(MUTATION_ARGS)
