"""The shrunk default recipe with the actor as 2 DeepSpeed ranks on Ray (``train.backend=deepspeed
train.world_size=2``, ``train.zero_stage`` 2 or 3) against the single-process embedded run, with the
helpers and tolerance of the FSDP2 test (tests/runtime/dp_loop.py): the same rewards (identical sampled
tokens), every logged metric within 1e-4, the saved policy within 1e-5, and checkpoints that resume
across DeepSpeed and the single-process engine.

ZeRO-2 runs in the default suite; ZeRO-3 and the PPO resume (the critic's weights loaded into
partitioned parameters by ``load_full_state_dict``) are ``slow``.
"""

from __future__ import annotations

import pytest
from safetensors.torch import load_file

pytest.importorskip("deepspeed", reason="DeepSpeed is an optional extra: pip install -e '.[deepspeed]'")

from tests.runtime.dp_loop import SINGLE, assert_rows_match, assert_same_policy, resume, run  # noqa: E402


def deepspeed(stage: int) -> list[str]:
    return ["runtime.kind=ray", "train.backend=deepspeed", "train.world_size=2", f"train.zero_stage={stage}"]


@pytest.mark.parametrize("stage", [2, pytest.param(3, marks=pytest.mark.slow)])
def test_two_deepspeed_ranks_on_ray_match_the_embedded_run_and_resume_single_process(
        ray_cluster, tmp_path, tiny_model_dir, dp_reference, stage):
    same_dir, same = dp_reference[2]
    rows = run(tmp_path / "ds", tiny_model_dir, 2, *deepspeed(stage))
    assert abs(same[1]["policy/loss"]) > 1e-3 and same[1]["reward/mean"] > 0  # not vacuous
    assert_rows_match(rows, same)
    assert_same_policy(tmp_path / "ds", same_dir, 2)  # full_state_dict gathered over the ranks, rank 0 wrote it
    # The DeepSpeed checkpoint (AdamW slots gathered from the ZeRO partitions) resumes in one process:
    # step 3 is the uninterrupted run's step 3.
    reference_dir, reference = dp_reference[3]
    resumed = resume(tmp_path / "ds", tmp_path / "ds_then_single", 3, *SINGLE)
    assert_rows_match(resumed[-1:], reference[-1:])
    assert_same_policy(tmp_path / "ds_then_single", reference_dir, 3)


@pytest.mark.slow
def test_a_single_process_ppo_checkpoint_resumes_on_two_zero3_ranks(ray_cluster, tmp_path, tiny_model_dir):
    """Actor and critic as ZeRO-3 groups: the critic's weights go through ``load_full_state_dict``."""
    ppo = "algorithm.name=ppo"
    reference = run(tmp_path / "s3", tiny_model_dir, 3, *SINGLE, ppo)
    run(tmp_path / "s2", tiny_model_dir, 2, *SINGLE, ppo)
    assert reference[-1]["critic/loss"] > 0
    resumed = resume(tmp_path / "s2", tmp_path / "single_then_ds", 3, *deepspeed(3), ppo)
    # The fraction of clipped values is a count at a threshold: a value within ~1e-8 of it flips (measured:
    # one token, 0.022 vs 0.006, with the critics' weights 7e-9 apart). Compared: the weights themselves.
    unclipped = [{k: v for k, v in r.items() if k != "critic/value_clip_fraction"} for r in (resumed[-1], reference[-1])]
    assert_rows_match(unclipped[:1], unclipped[1:])
    assert_same_policy(tmp_path / "single_then_ds", tmp_path / "s3", 3)
    critic = "checkpoints/step_000003/critic.safetensors"
    a, b = load_file(tmp_path / "single_then_ds" / critic), load_file(tmp_path / "s3" / critic)
    assert max(float((a[k] - b[k]).abs().max()) for k in a) < 1e-5
