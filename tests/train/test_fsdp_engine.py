"""FSDP2 on 2 gloo ranks vs the single-process engine on the same data: same losses, interchangeable
checkpoints. Tolerance: 1e-4 absolute on a loss of about 4.6 (float32, different reduction order)."""

from __future__ import annotations

import pytest

from rlxf.train import checkpoint as ckpt
from tests.train.dp_helpers import single, spawn_jobs

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
    assert fsdp == pytest.approx(reference[:3], abs=TOL)
    assert reference[0] != pytest.approx(reference[2], abs=100 * TOL)  # it trains: losses move
    resumed = single(tiny_model_dir, (3, 4), resume_from=str(tmp_path / "fsdp_ckpt"))
    assert resumed == pytest.approx(reference[3:], abs=TOL)
    assert back == pytest.approx(reference[2:], abs=TOL)
    assert ckpt.latest_checkpoint(tmp_path) is None  # (engines write only what they are asked to)
