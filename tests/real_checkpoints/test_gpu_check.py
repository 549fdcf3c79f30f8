"""benchmarks/gpu_check.py --tiny: the GPU check's code end to end on the CPU, JSON out."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_gpu_check_tiny_runs_end_to_end_on_the_cpu(tmp_path):
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src"), "OMP_NUM_THREADS": "1"}
    done = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "gpu_check.py"), "--tiny", "--skip-tests"],
                          cwd=tmp_path, env=env, capture_output=True, text=True, timeout=540)
    assert done.returncode == 0, done.stderr[-3000:]
    result = json.loads(done.stdout[done.stdout.index("{"):])
    assert result["device"] == "cpu" and "cuda_tests" not in result
    generation = result["generation"]
    assert generation["batch"] == 4 and generation["new_tokens"] == 8
    assert generation["torch_tokens_per_s"] > 0 and generation["hf_tokens_per_s"] > 0
    ratio = generation["torch_tokens_per_s"] / generation["hf_tokens_per_s"]  # of the rounded speeds
    assert abs(generation["torch_over_hf"] - ratio) <= 0.002 * ratio
    assert generation["fp32_parity"]["greedy_tokens_equal"] is True
    assert generation["fp32_parity"]["log_prob_max_diff"] <= 1e-5
    agreement = result["log_prob_agreement"]
    assert agreement["tokens"] == 32  # 4 rows x 8 tokens, no stop token
    assert 0 < agreement["rollout_bf16_vs_trainer_bf16"]["max"] < 0.05  # bf16 rounding, not a different policy
    step = result["rl_step"]
    assert step["algorithm"] == "grpo" and step["samples"] == 4 and step["peak_device_memory_gib"] is None
    assert step["stages_s"]["time/generation"] > 0 and step["stages_s"]["time/train"] > 0
