"""The trainer's half of an RL step (loops/rl.py ``train_on_batch``) with recording roles: which passes
run, what lands in the batch and in the metrics. Cases the mutation check (tools/mutation_check.py)
found unasserted by the end-to-end loop tests."""

import json
import math
from types import SimpleNamespace

import pytest
import torch
from torch.testing import assert_close

from rlxf.algos import AlgorithmConfig, FixedKLController
from rlxf.batch import TrajectoryBatch
from rlxf.checked_config import load_config
from rlxf.loops.rl import StageTimer, train_on_batch, train_rl
from rlxf.loops.run_state import RunState
from rlxf.roles.reward import RewardError
from tests.conftest import small_overrides
from tests.core import helpers


class Role:
    """An actor / critic / reference stand-in: fixed per-token outputs, a scripted update history."""

    def __init__(self, per_token: torch.Tensor, history: list[dict[str, float]]) -> None:
        self.per_token, self.history, self.updated = per_token, history, []

    def compute_log_probs(self, batch):
        return self.per_token.clone()

    compute_values = compute_log_probs

    def update(self, batch, generator):
        self.updated.append((batch.advantages.clone(), batch.returns.clone(), generator))
        return self.history


def scored_batch() -> TrajectoryBatch:
    # two groups of two; row 1 has 1 loss token, the others 2; row 3 was truncated
    mask = torch.tensor([[1.0, 1.0], [1.0, 0.0], [1.0, 1.0], [1.0, 1.0]])
    return TrajectoryBatch(
        prompt_ids=torch.ones(4, 1, dtype=torch.long), prompt_mask=torch.ones(4, 1, dtype=torch.long),
        response_ids=torch.ones(4, 2, dtype=torch.long), response_mask=mask.long(), loss_mask=mask,
        group_ids=torch.tensor([0, 0, 1, 1]), rewards=torch.tensor([1.0, 0.0, 2.0, 2.0]),
        rollout_log_probs=torch.full((4, 2), -1.0), truncated=torch.tensor([False, False, False, True]),
    )


def session(algo: AlgorithmConfig, reference: Role | None = None, critic: Role | None = None, reuse: bool = False,
            kl_control=None, teacher: Role | None = None):
    actor = Role(torch.full((4, 2), -0.5), [{"loss": 1.0, "ratio_max": 2.0}, {"loss": 3.0, "ratio_max": 5.0}])
    return SimpleNamespace(
        config=SimpleNamespace(algorithm=algo), actor=actor, critic=critic, reference=reference, teacher=teacher,
        kl_control=kl_control or FixedKLController(algo.kl_coef), shuffle_gen=torch.Generator(),
        on_policy_reuse=reuse, state=RunState(samples=8),
    )


def test_grpo_step_fills_the_batch_and_the_metrics():
    s = session(AlgorithmConfig(name="grpo"))
    batch, metrics = scored_batch(), {}
    train_on_batch(s, batch, StageTimer(), metrics)
    assert_close(batch.old_log_probs, torch.full((4, 2), -0.5))  # the actor's pass: not on-policy reuse
    assert_close(batch.token_rewards, torch.tensor([[0.0, 1.0], [0.0, 0.0], [0.0, 2.0], [0.0, 2.0]]))
    a = 0.5 / (math.sqrt(0.5) + 1e-6)  # group 0: scores 1, 0; group 1: equal scores -> 0
    assert_close(batch.advantages, torch.tensor([[a, a], [-a, 0.0], [0.0, 0.0], [0.0, 0.0]]))
    (advantages, _, generator), = s.actor.updated
    assert_close(advantages, batch.advantages)
    assert generator is s.shuffle_gen
    assert metrics["policy/loss"] == 2.0 and metrics["policy/ratio_max"] == 5.0  # mean; extreme
    assert s.state.samples == 12 and metrics["samples"] == 12  # 8 before + 4 rows
    assert metrics["response/length_mean"] == pytest.approx(7 / 4)
    assert metrics["response/length_max"] == 2.0
    assert metrics["response/truncated_fraction"] == 0.25
    assert "policy/kl" not in metrics and "policy/kl_coef" not in metrics


def test_on_policy_reuse_skips_the_old_log_prob_pass():
    s = session(AlgorithmConfig(name="grpo"), reuse=True)
    batch = scored_batch()
    train_on_batch(s, batch, StageTimer(), {})
    assert batch.old_log_probs is None


def test_kl_in_the_loss_is_measured_against_the_rollout_log_probs():
    reference = Role(torch.full((4, 2), -2.0), [])
    s = session(AlgorithmConfig(name="grpo", kl_coef=0.1, kl_estimator="k1"), reference=reference)
    batch, metrics = scored_batch(), {}
    train_on_batch(s, batch, StageTimer(), metrics)
    assert_close(batch.ref_log_probs, torch.full((4, 2), -2.0))
    assert metrics["policy/kl"] == pytest.approx(1.0)  # k1: rollout -1 minus reference -2 on every loss token
    assert_close(batch.token_rewards, torch.tensor([[0.0, 1.0], [0.0, 0.0], [0.0, 2.0], [0.0, 2.0]]))  # not in reward


@pytest.mark.parametrize("reuse", [False, True])
def test_distillation_scores_the_policy_tokens_against_the_teacher(reuse):
    # teacher -2 on every token; the policy's log-probs: the actor's pass (-0.5), or the sampler's (-1) on reuse
    teacher = Role(torch.full((4, 2), -2.0), [])
    s = session(AlgorithmConfig(name="grpo", advantage_estimator="on_policy_distillation"), teacher=teacher, reuse=reuse)
    batch, metrics, timer = scored_batch(), {}, StageTimer(trim=False)
    train_on_batch(s, batch, timer, metrics)
    student = -1.0 if reuse else -0.5
    assert_close(batch.teacher_log_probs, torch.full((4, 2), -2.0))
    assert_close(batch.advantages, (-2.0 - student) * batch.loss_mask)  # the rewards [1, 0, 2, 2] play no part
    assert metrics["distill/reverse_kl"] == pytest.approx(student + 2.0)
    assert "time/teacher_log_probs" in timer.seconds


def test_kl_in_the_reward_lowers_token_rewards_and_feeds_the_controller():
    class Controller(FixedKLController):
        def update(self, current_kl, n_steps):
            self.seen = (current_kl, n_steps)

    reference = Role(torch.full((4, 2), -2.0), [])
    control = Controller(0.5)
    s = session(AlgorithmConfig(name="rloo", kl_coef=0.5), reference=reference, kl_control=control)
    batch, metrics = scored_batch(), {}
    train_on_batch(s, batch, StageTimer(), metrics)
    # k1 = 1 per loss token, times 0.5, off every loss token's reward
    assert_close(batch.token_rewards, torch.tensor([[-0.5, 0.5], [-0.5, 0.0], [-0.5, 1.5], [-0.5, 1.5]]))
    assert control.seen == (pytest.approx(7 / 4), 4)  # mean over rows of each row's summed KL; rows seen
    assert metrics["policy/kl_coef"] == 0.5


def test_a_critic_gets_its_values_pass_and_its_update():
    critic = Role(torch.full((4, 2), 0.25), [{"value_loss": 0.5}, {"value_loss": 1.5}])
    s = session(AlgorithmConfig(name="ppo"), critic=critic)
    batch, metrics = scored_batch(), {}
    train_on_batch(s, batch, StageTimer(), metrics)
    assert_close(batch.values, torch.full((4, 2), 0.25))
    assert len(critic.updated) == 1 and metrics["critic/value_loss"] == 1.0
    assert_close(batch.returns, critic.updated[0][1])


def test_filter_overlong_zeroes_the_truncated_row_after_the_advantages():
    s = session(AlgorithmConfig(name="grpo", filter_overlong=True))
    batch, metrics = scored_batch(), {}
    train_on_batch(s, batch, StageTimer(), metrics)
    assert batch.loss_mask[3].tolist() == [0.0, 0.0] and batch.loss_mask[2].tolist() == [1.0, 1.0]
    assert metrics["response/filtered_overlong_fraction"] == 0.25


def test_stage_timer_adds_up_each_stage(monkeypatch):
    clock = iter([1.0, 3.0, 10.0, 15.0, 20.0, 20.5])
    monkeypatch.setattr("rlxf.loops.rl.time", SimpleNamespace(perf_counter=lambda: next(clock)))  # a fake clock
    timer = StageTimer()
    for stage in ("train", "train", "reward"):
        with timer(stage):
            pass
    assert timer.seconds == {"time/train": 2.0 + 5.0, "time/reward": 0.5}


def test_a_failed_step_saves_the_run_at_the_previous_step_even_between_checkpoints(tmp_path, tiny_model_dir):
    run_dir = tmp_path / "fail"
    helpers.CALLS["n"] = 0
    config = load_config(None, [*small_overrides(run_dir, tiny_model_dir, steps=3), "checkpoint.every=0",
                                "reward.function=tests.core.helpers:fails_on_the_third_call"])
    with pytest.raises(RewardError, match="fails_on_the_third_call"):
        train_rl(config, write=lambda _: None)
    # no checkpoint was due after step 1 (every=0: the start and the end), but it is saved for --resume
    assert sorted(p.name for p in (run_dir / "checkpoints").iterdir()) == ["step_000000", "step_000001"]


def test_each_checkpoint_holds_that_steps_data_position_and_generators(tmp_path, tiny_model_dir):
    # what --resume restores, in process: the SIGKILL-resume test checks the same end to end, but
    # through subprocesses, which the mutation check's forked runs would make slow
    run_dir = tmp_path / "run"
    train_rl(load_config(None, small_overrides(run_dir, tiny_model_dir, steps=2)), write=lambda _: None)
    states = [json.loads((run_dir / "checkpoints" / f"step_00000{i}" / "state.json").read_text()) for i in (1, 2)]
    assert [s["data_position"] for s in states] == [4, 8]  # train.prompts_per_step=4
    assert states[0]["sample_rng"] != states[1]["sample_rng"]
    assert states[0]["shuffle_rng"] != states[1]["shuffle_rng"]
