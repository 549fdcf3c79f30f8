"""loop: rl_async end to end on the tiny model: staleness bound, queue bound, off-policy correction, resume."""

import json

import pytest

from rlxf.checked_config import load_config
from rlxf.loops import get_loop
from tests.conftest import small_overrides


def run_async(run_dir, tiny_model_dir, *overrides, steps=3, resume=False):
    config = load_config(None, [*small_overrides(run_dir, tiny_model_dir, steps=steps), "loop=rl_async",
                                "sft.steps=0", "threads=1", "rollout.max_new_tokens=12", *overrides])
    get_loop(config.loop)(config, resume=resume, write=lambda _: None)
    return [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]


@pytest.mark.parametrize("max_staleness,queue_size,load_every", [(1, 1, 1), (2, 2, 1), (1, 1, 3)])
def test_trained_samples_stay_within_the_staleness_bound(tmp_path, tiny_model_dir, max_staleness, queue_size,
                                                         load_every):
    # load_every 3 with a bound of 1: the producer must load early whenever the bound holds it up
    rows = run_async(tmp_path / "run", tiny_model_dir, f"async_rl.max_staleness={max_staleness}",
                     f"async_rl.queue_size={queue_size}", "async_rl.chunk_steps=2", f"async_rl.load_every={load_every}")
    steps = [r for r in rows if "async/staleness_max" in r]
    assert [r["step"] for r in steps] == [1, 2, 3]
    for r in steps:
        trainer_version = r["step"] - 1
        assert 0 <= r["async/staleness_max"] <= max_staleness
        assert trainer_version - r["async/oldest_version"] == r["async/staleness_max"]
        assert r["async/dropped_stale"] == 0
        assert 1 <= r["async/queue_max"] <= queue_size + 1  # decoding or queued past the last one taken
        assert 1 <= r["async/inflight_max"] <= queue_size + 1
        assert 0.0 < r["policy/tis_weight_mean"] <= r["policy/tis_weight_max"] <= 2.0  # TIS on by default
        assert r["samples"] == 16 * r["step"]
    assert steps[0]["async/staleness_max"] == 0  # the first batch comes from the initial weights


def test_zero_staleness_is_on_policy(tmp_path, tiny_model_dir):
    rows = run_async(tmp_path / "run", tiny_model_dir, "async_rl.max_staleness=0", "async_rl.off_policy_correction=false")
    steps = [r for r in rows if "async/staleness_max" in r]
    assert [r["async/staleness_max"] for r in steps] == [0, 0, 0]
    assert [r["async/oldest_version"] for r in steps] == [0, 1, 2]
    assert all("policy/tis_weight_mean" not in r for r in steps)


def test_resume_keeps_the_bound(tmp_path, tiny_model_dir):
    run_dir = tmp_path / "run"
    run_async(run_dir, tiny_model_dir, "async_rl.max_staleness=1", steps=2)
    rows = run_async(run_dir, tiny_model_dir, "async_rl.max_staleness=1", steps=3, resume=True)
    last = [r for r in rows if r.get("step") == 3][-1]
    assert last["async/oldest_version"] == 2 and last["async/staleness_max"] == 0  # regenerated from step 2's weights
    assert json.loads((run_dir / "summary.json").read_text())["steps"] == 3


def evaluate_policy(tmp_path, tiny_model_dir, policy_dir) -> dict:
    from rlxf.eval.accuracy import evaluate
    from rlxf.loops.setup import build_rollout, build_run_context, load_policy

    config = load_config(None, [*small_overrides(tmp_path / "eval", tiny_model_dir, steps=1), "threads=1",
                                "rollout.max_new_tokens=12"])
    context = build_run_context(config)
    rollout = build_rollout(config, load_policy(config, str(policy_dir), context.device), context.tokenizer)
    return evaluate(rollout, context.reward, context.task.eval, config.eval.batch_size, 12)


@pytest.mark.parametrize("load_every", [1, 3])
def test_held_out_evaluation_sees_the_trained_weights(tmp_path, tiny_model_dir, load_every):
    """Evaluation borrows the producer's engine; it first loads the weights posted last, so step 2's
    eval is the step-2 policy's even when the producer would not have loaded them yet."""
    run_dir = tmp_path / "run"
    rows = run_async(run_dir, tiny_model_dir, "eval.every=1", "checkpoint.every=1", "sft.steps=40", "train.optim.lr=0.03",
                     f"async_rl.load_every={load_every}", "async_rl.max_staleness=2", "async_rl.queue_size=2",
                     steps=2)
    own = {step: evaluate_policy(tmp_path, tiny_model_dir, run_dir / "checkpoints" / f"step_{step:06d}" / "policy")
           for step in (1, 2)}
    keys = set(own[1])  # accuracy, reward, length and the reward's components
    assert {"eval/accuracy", "eval/reward", "eval/reward/correct"} <= keys
    logged = {r["step"]: {k: r[k] for k in keys} for r in rows if "eval/reward" in r and r["step"] > 0}
    # the two policies answer differently (a large lr: with smaller ones both steps' policies, of this 2-layer
    # model, can answer every problem with EOS alike, depending on the samples drawn)
    assert own[1] != own[2]
    assert logged == {1: pytest.approx(own[1]), 2: pytest.approx(own[2])}


@pytest.mark.parametrize(("overrides", "tis_level"), [
    ([], "token"),  # off-policy correction switches TIS on
    (["algorithm.rollout_mask=geometric"], "token"),  # a mask that only masks goes with TIS
    (["algorithm.rollout_mask=icepop"], "none"),  # a mask that weights its kept tokens refuses TIS
    (["async_rl.off_policy_correction=false"], "none"),
])
def test_async_off_policy_correction_and_rollout_masks(overrides, tis_level):
    from rlxf.loops.rl_async import async_config

    config = load_config(None, ["loop=rl_async", *overrides])
    assert async_config(config).algorithm.tis_level == tis_level
