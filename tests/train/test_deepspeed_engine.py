"""DeepSpeed ZeRO-2 and ZeRO-3 on 2 gloo ranks vs the single-process engine on the same data: same
losses, and checkpoints that cross between DeepSpeed, the single-process engine and FSDP2 in both
directions. Tolerance: 1e-5 absolute on a loss of about 4.6 (float32, different reduction order); the
largest difference measured on this test's comparisons was 3.3e-7."""

from __future__ import annotations

import pytest

pytest.importorskip("deepspeed", reason="DeepSpeed is an optional extra: pip install -e '.[deepspeed]'")

from tests.train.dp_helpers import losses, single, spawn_jobs  # noqa: E402

TOL = 1e-5


@pytest.mark.parametrize("stage", [2, 3])
def test_deepspeed_zero_matches_single_process_and_checkpoints_cross_over(tmp_path, tiny_model_dir, stage):
    # ZeRO-2 is the default: build_train_engine("deepspeed", model, cfg) without options.
    ds = {"backend": "deepspeed", "options": {} if stage == 2 else {"zero_stage": stage}}
    ckpts = {name: str(tmp_path / name) for name in ("single", "ds", "fsdp", "ds0")}
    reference = losses(single(tiny_model_dir, (0, 4)))
    single(tiny_model_dir, (0, 2), save_to=ckpts["single"])
    runs = spawn_jobs(tmp_path, tiny_model_dir, [
        # DeepSpeed trains 3 steps and saves (the single-process engine and FSDP2 resume from it).
        {**ds, "steps": (0, 3), "save_to": ckpts["ds"]},
        # DeepSpeed resumes the single-process checkpoint for steps 3 and 4, its weights loaded into the
        # built engine (load_full_state_dict: ZeRO-3's partitions and the fp32 master copies).
        {**ds, "steps": (2, 4), "resume_from": ckpts["single"], "load_full": True},
        # FSDP2 saves after 2 steps; DeepSpeed resumes it for steps 3 and 4.
        {"backend": "fsdp2", "steps": (0, 2), "save_to": ckpts["fsdp"]},
        {**ds, "steps": (2, 4), "resume_from": ckpts["fsdp"]},
        # FSDP2 resumes the DeepSpeed checkpoint for step 4.
        {"backend": "fsdp2", "steps": (3, 4), "resume_from": ckpts["ds"]},
        # A checkpoint saved before the first step (AdamW still empty: nothing saved, nothing stepped)
        # resumes into the uninterrupted run's first steps.
        {**ds, "steps": (0, 0), "save_to": ckpts["ds0"]},
        {**ds, "steps": (0, 2), "resume_from": ckpts["ds0"]},
    ])
    fresh, from_single, fsdp_first, from_fsdp, fsdp_from_ds, _, from_step0 = map(losses, runs)
    assert fresh == pytest.approx(reference[:3], abs=TOL)
    assert reference[0] != pytest.approx(reference[2], abs=100 * TOL)  # it trains: losses move
    assert losses(single(tiny_model_dir, (3, 4), resume_from=ckpts["ds"])) == pytest.approx(reference[3:], abs=TOL)
    assert from_single == pytest.approx(reference[2:], abs=TOL)
    assert fsdp_first == pytest.approx(reference[:2], abs=TOL)
    assert from_fsdp == pytest.approx(reference[2:], abs=TOL)
    assert fsdp_from_ds == pytest.approx(reference[3:], abs=TOL)
    assert from_step0 == pytest.approx(reference[:2], abs=TOL)
