"""rlxf: reinforcement learning from any feedback for LLMs, from a laptop CPU to a Ray cluster."""

import os

# OpenMP threads that spin while they wait for work fight any other busy process for a core: on 2
# cores beside one busy loop, torch's default made the default recipe's step 7.9x slower than idle
# (benchmarks/threads_under_load.py, docs/benchmarks.md). Passive waiting must be chosen before torch
# loads its OpenMP runtime, hence here; a value already in the environment wins.
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")

# Before any large tensor exists: freed blocks stay in the process for the next micro-batch (see there).
from rlxf.freed_memory import keep_freed_memory  # noqa: E402

KEEPS_FREED_MEMORY = keep_freed_memory()
