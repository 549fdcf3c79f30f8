"""FSDP2 on 2 gloo ranks vs the single-process engine on the same data: same losses and gradient norms,
interchangeable checkpoints. Tolerance: 1e-4 absolute on a loss of about 4.6 and on a gradient norm of
about 2 (float32, different reduction order). The gradient norm is the check on the gradient's size:
losing the world-size factor halves every gradient but moves the next losses only by ~1e-4."""

from __future__ import annotations

import pytest

from rlxf.train import checkpoint as ckpt
from tests.train.dp_helpers import grad_norms, losses, single, spawn_jobs

TOL = 1e-4


def test_fsdp2_matches_single_process_and_checkpoints_cross_over(tmp_path, tiny_model_dir):
    reference = single(tiny_model_dir, (0, 4))
    # The single-process engine saves after 2 steps (FSDP2 resumes from it below).
    single(tiny_model_dir, (0, 2), save_to=str(tmp_path / "single_ckpt"))
    assert (tmp_path / "single_ckpt" / "actor.optimizer.safetensors").exists()
    fsdp, back = spawn_jobs(tmp_path, tiny_model_dir, [
        # FSDP2 trains 3 steps and saves; the single-process engine resumes for step 4.
        {"backend": "fsdp2", "steps": (0, 3), "save_to": str(tmp_path / "fsdp_ckpt")},
        # FSDP2 resumes the single-process checkpoint for steps 3 and 4.
        {"backend": "fsdp2", "steps": (2, 4), "resume_from": str(tmp_path / "single_ckpt")},
    ])
    assert grad_norms(fsdp) == pytest.approx(grad_norms(reference)[:3], abs=TOL)
    assert losses(fsdp) == pytest.approx(losses(reference)[:3], abs=TOL)
    assert min(grad_norms(reference)) > 0.1  # gradients of a size worth comparing
    assert reference[0][0] != pytest.approx(reference[2][0], abs=100 * TOL)  # it trains: losses move
    resumed = single(tiny_model_dir, (3, 4), resume_from=str(tmp_path / "fsdp_ckpt"))
    assert losses(resumed) == pytest.approx(losses(reference)[3:], abs=TOL)
    assert losses(back) == pytest.approx(losses(reference)[2:], abs=TOL)
    assert grad_norms(back) == pytest.approx(grad_norms(reference)[2:], abs=TOL)
    assert ckpt.latest_checkpoint(tmp_path) is None  # (engines write only what they are asked to)
