"""``env: verifiers``: a verifiers environment package (tests/envs/vf_packages, written only against
``verifiers.v1``) runs its episodes with its own code, its model client on rlxf's endpoint over the tiny
model. The rewards rlxf records are the environment's own scoring of the very completions, and the tokens
trained are the tokens sampled (the trainer's forward pass gives the recorded log-probs)."""

import sys
from pathlib import Path

import pytest
import torch

from rlxf.config import EnvConfig
from rlxf.rollout.sampling import SamplingParams

vf = pytest.importorskip("verifiers.v1", reason="verifiers is not installed (pip install 'rlxf[verifiers]')")
PACKAGES = str(Path(__file__).parents[2] / "examples" / "environments" / "verifiers")
EOS = 2
LOCAL = {"agent": {"runtime": {"type": "subprocess"}}}


@pytest.fixture
def sums(monkeypatch):
    """The environment package importable as installed ones are (a top-level module); its score function."""
    monkeypatch.syspath_prepend(PACKAGES)
    import rlxf_vf_sums

    return rlxf_vf_sums


@pytest.fixture
def make_role(tiny_model, tokenizer):
    from rlxf.roles.agent_rollout import AgentRolloutRole
    from rlxf.rollout.torch_engine import TorchRolloutEngine

    roles = []

    def make(max_turns=4, max_total_tokens=192, **kwargs):  # the tiny tokenizer: a token a character
        engine = TorchRolloutEngine(tiny_model, EOS, tokenizer.pad_token_id)
        cfg = EnvConfig(name="verifiers", kwargs=kwargs, max_turns=max_turns, max_total_tokens=max_total_tokens)
        roles.append(AgentRolloutRole(engine, tokenizer, False, 128, cfg))
        return roles[-1]

    yield make
    for role in roles:
        role.close()


def rows(config, count=2):
    from rlxf.data.verifiers_tasks import verifiers_task

    splits = verifiers_task(seed=0, eval_size=2, environment="rlxf_vf_sums", config={**LOCAL, "taskset": config})
    assert len(splits.train) == 10 and len(splits.eval) == 2  # the last eval_size tasks are held out
    return splits.train[:count]


def check_trained_equals_sampled(batch, tiny_model, row):
    prompt = batch.prompt_ids[row][batch.prompt_mask[row].bool()]
    n = int(batch.response_mask[row].sum())
    full = torch.cat([prompt, batch.response_ids[row, :n]])[None]
    with torch.no_grad():
        logits = tiny_model(full).logits[0, len(prompt) - 1: -1].float().log_softmax(-1)
    recomputed = logits.gather(-1, full[0, len(prompt):, None]).squeeze(-1)
    keep = batch.loss_mask[row, :n].bool()
    assert keep.any()
    assert torch.allclose(recomputed[keep], batch.rollout_log_probs[row, :n][keep], atol=1e-4)


@pytest.mark.parametrize("turns", [1, 2])
def test_rewards_are_the_environments_scoring_of_the_sampled_tokens(sums, make_role, tiny_model, tokenizer, turns):
    role = make_role()
    tasks = rows({"turns": turns})
    batch = role.generate(tasks, SamplingParams(n=2, max_new_tokens=8), torch.Generator().manual_seed(0))
    assert batch.group_ids.tolist() == [0, 0, 1, 1]  # n_samples episodes per task
    for row in range(4):
        meta = batch.metadata[row]
        task = tasks[row // 2]
        assert "agent_failure" not in meta and meta["turns"] == turns
        n = int(batch.response_mask[row].sum())
        response, mask = batch.response_ids[row, :n].tolist(), batch.loss_mask[row, :n].tolist()
        texts = [tokenizer.decode(response[s:e], skip_special_tokens=True) for s, e in meta["turn_spans"]]
        # the environment's own reward function on the decoded sampled tokens of the last turn
        expected = sums.score_reply(texts[-1], task["answer"])
        assert meta["env_components"]["correct"] == expected
        assert meta["env_reward"] == expected and meta["turn_rewards"][-1] == expected
        assert meta["env_components"]["reply_chars"] == float(len(texts[-1]))  # a metric, logged by name
        if turns == 2:  # the harness's follow-up between the policy's turns: masked
            (_, e0), (s1, _) = meta["turn_spans"]
            assert mask[e0:s1] == [0] * (s1 - e0) and s1 > e0
            assert sums.CHECK.strip() in tokenizer.decode(response[e0:s1])
        check_trained_equals_sampled(batch, tiny_model, row)


def test_a_failing_episode_is_a_failed_trajectory(sums, make_role):
    role = make_role()
    batch = role.generate(rows({"crash": True}, 1), SamplingParams(n=2, max_new_tokens=4), torch.Generator().manual_seed(0))
    for meta in batch.metadata:
        assert meta["env_reward"] == 0.0 and meta["env_components"]["agent_error"] == 1.0
        assert "rlxf_vf_sums" in meta["agent_failure"] and "the harness's own bug" in meta["agent_failure"]
    assert role.last_failures["error"] == 2


def test_a_scoring_function_that_raises_names_the_environment_and_task(sums, make_role):
    from rlxf.rewards.guarded import RewardError

    role = make_role()
    with pytest.raises(RewardError) as err:
        role.generate(rows({"explode": True}, 1), SamplingParams(n=1, max_new_tokens=4))
    message = str(err.value)
    assert "'rlxf_vf_sums'" in message and "sum-0" in message and "the reward's own bug" in message
    assert "\n" not in message


def test_missing_package_is_one_line_with_the_install_command(monkeypatch):
    from rlxf.envs.base import env_factory
    from rlxf.errors import MissingPackageError

    monkeypatch.setitem(sys.modules, "verifiers", None)
    monkeypatch.setitem(sys.modules, "verifiers.v1", None)
    with pytest.raises(MissingPackageError, match=r"pip install 'rlxf\[verifiers\]'"):
        env_factory("verifiers", {})()


RECIPE = Path(__file__).parents[2] / "recipes" / "verifiers_sums.yaml"


def train(tmp_path, tiny_model_dir, taskset: str, *extra: str) -> int:
    from rlxf.cli import main

    return main(["train", str(RECIPE), f"model.path={tiny_model_dir}", f"run_dir={tmp_path / 'run'}",
                 f"data.task_args.package_dir={PACKAGES}", "data.eval_size=4", "sft.steps=0", "train.steps=3",
                 "train.prompts_per_step=2", "rollout.n_samples=2", "train.mini_batch_size=4",
                 "train.micro_batch_size=4", "eval.every=0", "logging.plot=false", "logging.progress_bar=false",
                 f"data.task_args.config={{taskset: {taskset}, agent: {{runtime: {{type: subprocess}}}}}}", *extra])


def one_rlxf_line(err: str) -> str:
    lines = [line for line in err.splitlines() if line.startswith("rlxf: ") and "agents failed" not in line]
    assert len(lines) == 1 and "Traceback" not in err, err
    return lines[0]


def test_run_whose_every_episode_fails_stops_naming_the_environment(tmp_path, tiny_model_dir, capsys):
    code = train(tmp_path, tiny_model_dir, "{size: 20, crash: true}", "env.max_failed_steps=2")
    line = one_rlxf_line(capsys.readouterr().err)
    assert code == 1 and "every trajectory failed" in line and "env.max_failed_steps=2" in line
    assert "verifiers environment rlxf_vf_sums task sum-" in line and "the harness's own bug" in line


def test_run_whose_scoring_function_raises_stops_in_one_line(tmp_path, tiny_model_dir, capsys):
    code = train(tmp_path, tiny_model_dir, "{size: 20, explode: true}")
    line = one_rlxf_line(capsys.readouterr().err)
    assert code == 1 and "verifiers environment 'rlxf_vf_sums', task sum-" in line
    assert "a scoring function raised" in line and "the reward's own bug" in line
