"""FSDP2 on 2 gloo ranks vs the single-process engine on the same data: same losses, interchangeable
checkpoints. Tolerance: 1e-4 absolute on a loss of about 4.6 (float32, different reduction order)."""

from __future__ import annotations

import json

import pytest
import torch
import torch.multiprocessing as mp

from rlxf.models.loading import load_causal_lm
from rlxf.train import checkpoint as ckpt
from rlxf.train.engine import TrainEngine
from tests.train.dp_helpers import OPTIM, ROWS, local_counts, train_steps
from tests.train.fsdp_worker import fsdp_rank

TOL = 1e-4


def spawn_fsdp(tmp_path, model_dir, steps, tag, resume_from=None, save_to=None) -> list[float]:
    out = tmp_path / f"{tag}.json"
    args = (2, str(tmp_path / f"{tag}.init"), model_dir, steps, str(out), resume_from, save_to)
    mp.spawn(fsdp_rank, args=args, nprocs=2, join=True)
    return json.loads(out.read_text())


def single(model_dir, steps, resume_from=None, save_to=None) -> list[float]:
    torch.manual_seed(0)
    model = load_causal_lm(f"{resume_from}/policy" if resume_from else model_dir).requires_grad_(True)
    engine = TrainEngine(model, OPTIM)
    if resume_from:
        engine.load_state(resume_from, "actor")
    losses = train_steps(engine, range(*steps), slice(0, ROWS), local_counts)
    if save_to:
        model.save_pretrained(f"{save_to}/policy")
        engine.save_state(save_to, "actor")
    return losses


def test_fsdp2_matches_single_process_and_checkpoints_cross_over(tmp_path, tiny_model_dir):
    reference = single(tiny_model_dir, (0, 4))
    # FSDP2 trains 3 steps and saves; the single-process engine resumes for step 4.
    fsdp = spawn_fsdp(tmp_path, tiny_model_dir, (0, 3), "fsdp", save_to=str(tmp_path / "fsdp_ckpt"))
    assert fsdp == pytest.approx(reference[:3], abs=TOL)
    assert reference[0] != pytest.approx(reference[2], abs=100 * TOL)  # it trains: losses move
    resumed = single(tiny_model_dir, (3, 4), resume_from=str(tmp_path / "fsdp_ckpt"))
    assert resumed == pytest.approx(reference[3:], abs=TOL)
    # The single-process engine saves after 2 steps; FSDP2 resumes for steps 3 and 4.
    single(tiny_model_dir, (0, 2), save_to=str(tmp_path / "single_ckpt"))
    assert (tmp_path / "single_ckpt" / "actor.optimizer.safetensors").exists()
    back = spawn_fsdp(tmp_path, tiny_model_dir, (2, 4), "back", resume_from=str(tmp_path / "single_ckpt"))
    assert back == pytest.approx(reference[2:], abs=TOL)
    assert ckpt.latest_checkpoint(tmp_path) is None  # (engines write only what they are asked to)
