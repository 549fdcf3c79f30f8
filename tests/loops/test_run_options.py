"""Options of a run that change what it reads, renders, evaluates or starts from, each checked by the
number or text it changes: data.eval_path, data.chat_template, eval.max_new_tokens, env single_turn,
model.critic_path."""

import json

import pytest

from rlxf.checked_config import load_config
from rlxf.loops.rl import train_rl
from tests.conftest import small_overrides


def run(run_dir, model_dir, *overrides) -> list[dict]:
    config = load_config(None, [*small_overrides(run_dir, model_dir, steps=1), "checkpoint.every=0", *overrides])
    train_rl(config, write=lambda _: None)
    return [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]


def test_eval_path_supplies_the_held_out_rows(tmp_path):
    from rlxf.data.prompts import load_task

    rows = [{"prompt": f"{i}+1=", "answer": str(i + 1)} for i in range(30)]
    held_out = [{"prompt": f"{i}+2=", "answer": str(i + 2)} for i in range(5)]
    for name, data in (("train.jsonl", rows), ("eval.jsonl", held_out)):
        (tmp_path / name).write_text("".join(json.dumps(r) + "\n" for r in data))
    base = ["data.task=file", "data.task_args={}", f"data.path={tmp_path / 'train.jsonl'}", "data.eval_size=4"]
    with_file = load_task(load_config(None, [*base, f"data.eval_path={tmp_path / 'eval.jsonl'}"]).data, 0)
    assert [r["prompt"] for r in with_file.eval] == [r["prompt"] for r in held_out]
    assert len(with_file.train) == 30  # every row of data.path trains
    without = load_task(load_config(None, base).data, 0)  # the last eval_size rows held out instead
    assert [r["prompt"] for r in without.eval] == ["26+1=", "27+1=", "28+1=", "29+1="] and len(without.train) == 26


def test_chat_template_renders_the_prompts(tmp_path, tiny_model_dir, tokenizer):
    run(tmp_path, tiny_model_dir, "sft.steps=0", "data.chat_template=true", "logging.samples_every=1")
    prompts = [json.loads(line)["prompt"] for line in (tmp_path / "samples.jsonl").read_text().splitlines()]
    assert prompts and all(p.startswith("user: ") and p.endswith("\nassistant: ") for p in prompts), prompts[:2]
    question = prompts[0].removeprefix("user: ").removesuffix("\nassistant: ")
    assert prompts[0] == tokenizer.apply_chat_template([{"role": "user", "content": question}], tokenize=False,
                                                       add_generation_prompt=True)


def test_eval_max_new_tokens_caps_held_out_answers(tmp_path, tiny_model_dir):
    rows = run(tmp_path, tiny_model_dir, "sft.steps=0", "eval.max_new_tokens=2", "rollout.max_new_tokens=6")
    assert rows[1]["response/length_mean"] > 2  # training samples use the rollout budget
    assert 0 < rows[0]["eval/response_length"] <= 2 and 0 < rows[1]["eval/response_length"] <= 2


def test_single_turn_env_is_the_plain_loop(tmp_path, sft_model_dir):
    """One turn scored by the same reward: the same samples, rewards and update as without an environment."""
    plain = run(tmp_path / "plain", sft_model_dir)
    env = run(tmp_path / "env", sft_model_dir, "env={name: single_turn, kwargs: {reward: arithmetic}}",
              "reward.function=env")
    for key in ("reward/mean", "response/length_mean", "policy/loss", "policy/grad_norm", "eval/accuracy"):
        assert env[1][key] == pytest.approx(plain[1][key], abs=1e-6), key
    assert plain[1]["policy/grad_norm"] > 0 and plain[1]["reward/mean"] > 0


def test_critic_path_starts_the_critic_elsewhere(tmp_path, tiny_model_dir, sft_model_dir):
    """model.critic_path changes the critic's start only: the policy's samples and rewards stay the same,
    the critic's gradient (its value head reads another backbone's features) does not."""
    ppo = ["algorithm.name=ppo", "sft.steps=0", "algorithm.ppo_epochs=1"]
    own = run(tmp_path / "own", sft_model_dir, *ppo)
    other = run(tmp_path / "other", sft_model_dir, *ppo, f"model.critic_path={tiny_model_dir}")
    assert other[1]["response/length_mean"] == own[1]["response/length_mean"]
    assert other[1]["reward/mean"] == own[1]["reward/mean"] > 0
    assert other[1]["critic/grad_norm"] != pytest.approx(own[1]["critic/grad_norm"], rel=1e-3)
    assert min(other[1]["critic/grad_norm"], own[1]["critic/grad_norm"]) > 0
