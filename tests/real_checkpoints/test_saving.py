"""save_model: save_pretrained without importing DeepSpeed (through accelerate's unwrap), same files."""

from __future__ import annotations

import json
import os
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


LOOP_CHILD = """
import json, sys
from rlxf.cli import main
main(sys.argv[1:])
print(json.dumps({"deepspeed": "deepspeed" in sys.modules}))
"""


@pytest.mark.parametrize("recipe", ["online_dpo", "reward_model"])
def test_the_pair_loops_checkpoints_import_no_deepspeed(tmp_path, recipe):
    """The offline loops (sft, dpo, online_dpo, reward_model) write their checkpoints through save_model too."""
    pytest.importorskip("deepspeed")
    args = ["train", f"recipes/{recipe}.yaml", f"run_dir={tmp_path / 'run'}", "sft.steps=0", "preference.steps=1",
            "preference.batch_size=4", "preference.micro_batch_size=4", "eval.every=0", "data.eval_size=4"]
    done = subprocess.run([sys.executable, "-c", LOOP_CHILD, *args], capture_output=True, text=True, check=True,
                          env={**os.environ, "OMP_NUM_THREADS": "1"})
    assert json.loads(done.stdout.splitlines()[-1]) == {"deepspeed": False}
    assert (tmp_path / "run" / "checkpoints" / "step_000001").is_dir()
