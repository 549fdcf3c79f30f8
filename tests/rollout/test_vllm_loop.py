"""The RL loop with ``rollout.engine=vllm``: every step syncs the new weights into vLLM with the weight-sync
protocol's version and checksum check, and the trainer's recomputed log-probs equal the rollout's.

The run is a separate ``rlxf train`` process: vLLM's engine core runs in the trainer's process, and vLLM's
distributed state is one per process, which the session's engine (conftest.py) already holds."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
from tests.conftest import small_overrides

pytestmark = [pytest.mark.vllm, pytest.mark.slow]  # a vLLM start-up and 3 RL steps: 90 s on 2 busy cores
pytest.importorskip("vllm", reason="vLLM is not installed: `make test-vllm` runs these tests in .venv-vllm")


def test_rl_loop_on_vllm_syncs_and_checks_every_step(tmp_path, tiny_model_dir):
    overrides = small_overrides(tmp_path, tiny_model_dir, steps=3) + [
        "rollout.engine=vllm", "rollout.engine_options={enforce_eager: true, max_model_len: 128}",
        "runtime.weight_sync.checksum=true", "sft.steps=2", "threads=1",
    ]
    env = {**os.environ, "VLLM_CPU_KVCACHE_SPACE": os.environ.get("VLLM_CPU_KVCACHE_SPACE", "1")}
    done = subprocess.run([sys.executable, "-m", "rlxf.cli", "train", *overrides], env=env, capture_output=True,
                          text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    steps = [r for r in map(json.loads, (tmp_path / "metrics.jsonl").read_text().splitlines()) if "samples" in r]
    assert [r["step"] for r in steps] == [1, 2, 3]
    assert [r["weight_sync/checksum_ok"] for r in steps] == [1.0] * 3
    assert [r["weight_sync/version"] for r in steps] == [1.0, 2.0, 3.0]
    # mean |rollout log-prob - trainer's| per token: fp32 kernels apart (measured ~1e-7), not a policy apart
    assert max(r["policy/rollout_log_prob_diff"] for r in steps) < 1e-5
