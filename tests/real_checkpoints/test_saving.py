"""save_model: save_pretrained without importing DeepSpeed (through accelerate's unwrap), same files."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
import torch
import transformers

from rlxf.models.loading import load_causal_lm
from rlxf.models.saving import save_model

CHILD = """
import json, sys
from rlxf.models.loading import load_causal_lm
from rlxf.models.saving import save_model
save_model(load_causal_lm(sys.argv[1]), sys.argv[2])
print(json.dumps({"deepspeed": "deepspeed" in sys.modules, "mlflow": "mlflow" in sys.modules}))
"""


def test_saving_a_policy_imports_neither_deepspeed_nor_mlflow(tiny_model_dir, tmp_path):
    pytest.importorskip("deepspeed")  # without it there is nothing to avoid
    done = subprocess.run([sys.executable, "-c", CHILD, tiny_model_dir, str(tmp_path / "saved")],
                          capture_output=True, text=True, check=True)
    assert json.loads(done.stdout.splitlines()[-1]) == {"deepspeed": False, "mlflow": False}
    saved = transformers.AutoModelForCausalLM.from_pretrained(tmp_path / "saved").state_dict()
    original = load_causal_lm(tiny_model_dir).state_dict()
    assert saved.keys() == original.keys() and all(torch.equal(saved[k], original[k]) for k in saved)


def test_a_given_state_dict_is_what_is_written(tiny_model_dir, tmp_path):
    model = load_causal_lm(tiny_model_dir)
    weights = {name: torch.full_like(value, 0.5) for name, value in model.state_dict().items()}
    save_model(model, tmp_path / "halves", weights)
    saved = transformers.AutoModelForCausalLM.from_pretrained(tmp_path / "halves")
    assert all(bool((value == 0.5).all()) for value in saved.state_dict().values())
