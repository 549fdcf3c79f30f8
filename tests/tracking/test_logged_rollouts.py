"""Logged rollouts: which rows are picked, what each row says, and that the log stays bounded."""

import json

import pytest
import torch

from rlxf.batch import TrajectoryBatch
from rlxf.tracking.config import LoggingConfig
from rlxf.tracking.metrics import MetricsLogger
from rlxf.tracking.rollout_rows import pick_rows, rollout_rows
from rlxf.tracking.samples import SampleLog
from rlxf.tracking.tracker_run import flatten, require


def test_pick_rows_takes_one_row_per_prompt_before_a_second():
    assert pick_rows([0, 0, 1, 1, 2, 2], 4) == [0, 2, 4, 1]
    assert pick_rows([5, 5, 5], 2) == [0, 1]
    assert pick_rows([0, 1], 8) == [0, 1]


def multi_turn_batch(tokenizer) -> TrajectoryBatch:
    prompts = [tokenizer.encode("1+2="), tokenizer.encode("7+5=")]
    responses = [tokenizer.encode("3"), tokenizer.encode("@calc(7+5)=12\n12")]
    width = max(map(len, responses))
    ids = torch.tensor([r + [tokenizer.pad_token_id] * (width - len(r)) for r in responses])
    mask = torch.tensor([[1] * len(r) + [0] * (width - len(r)) for r in responses])
    loss_mask = mask.clone()
    loss_mask[1, 10:14] = 0  # "=12\n": the tool's answer is not the policy's
    versions = loss_mask * torch.tensor([[3], [4]])
    versions[1, 0] = 2  # row 1's first token came from an older policy
    advantages = torch.zeros(2, width)
    advantages[0, 0] = 1.5
    advantages[1] = torch.arange(width, dtype=torch.float32)
    return TrajectoryBatch(
        prompt_ids=torch.tensor([prompts[0], prompts[1]]), prompt_mask=torch.ones(2, 4, dtype=torch.long),
        response_ids=ids, response_mask=mask, loss_mask=loss_mask, group_ids=torch.tensor([0, 1]),
        policy_version=versions, truncated=torch.tensor([False, True]), rewards=torch.tensor([1.1, 0.0]),
        advantages=advantages,
        metadata=[
            {"answer": "3", "reward_components": {"correct": 1.0, "format": 1.0}, "turns": 1,
             "env_components": {"tool_calls": 0.0}},
            {"answer": "12", "reward_components": {"correct": 0.0, "format": 0.0}, "turns": 2,
             "env_components": {"tool_calls": 1.0}},
        ],
    )


def test_a_row_carries_every_field(tokenizer):
    batch = multi_turn_batch(tokenizer)
    first, second = rollout_rows(batch, tokenizer, step=7, limit=8)
    assert first == {
        "step": 7, "group": 0, "prompt": "1+2=", "response": "3", "reward": pytest.approx(1.1),
        "reward/correct": 1.0, "reward/format": 1.0, "advantage": 1.5, "length": 1, "truncated": False,
        "policy_version": 3, "turns": 1, "tool_calls": 0.0, "answer": "3",
    }
    own = [i for i in range(16) if not 10 <= i < 14]  # the policy's 12 tokens
    assert second["advantage"] == pytest.approx(sum(own) / len(own))
    assert second["response"] == "@calc(7+5)=12\n12" and second["length"] == 16
    assert second["truncated"] is True and second["policy_version"] == 2
    assert second["turns"] == 2 and second["tool_calls"] == 1.0


def test_samples_log_stays_bounded_over_a_long_run(tmp_path, tokenizer):
    settings = LoggingConfig(sinks=["jsonl"], samples_every=3, samples_per_step=2, samples_max_mb=0.002)
    logger = MetricsLogger(tmp_path, ["jsonl"], settings=settings)
    batch = multi_turn_batch(tokenizer)
    one_write = len("".join(json.dumps(r) + "\n" for r in rollout_rows(batch, tokenizer, 999, 2)).encode())
    cap = int(0.002 * 1024 * 1024)
    for step in range(1, 3001):
        logger.log_samples(step, batch, tokenizer)
        size = sum(p.stat().st_size for p in tmp_path.glob("samples*.jsonl"))
        assert size <= 2 * cap + one_write, step
    logger.close()
    kept = SampleLog(tmp_path / "samples.jsonl", 0.002).rows()
    steps = [r["step"] for r in kept]
    assert steps[-1] == 3000 and all(s % 3 == 0 for s in steps) and steps == sorted(steps)
    assert len(kept) < 2 * cap / 150  # the first steps were dropped long ago
    assert {p.name for p in tmp_path.glob("samples*.jsonl")} == {"samples.jsonl", "samples.1.jsonl"}


def test_resume_drops_logged_rows_after_the_checkpoint(tmp_path):
    log = SampleLog(tmp_path / "samples.jsonl", 1.0)
    log.write([{"step": s, "x": s} for s in (1, 2, 3, 4)])
    resumed = SampleLog(tmp_path / "samples.jsonl", 1.0, resume_step=2)
    assert [r["step"] for r in resumed.rows()] == [1, 2]


def test_eval_flips_are_counted_against_the_previous_evaluation(tmp_path):
    logger = MetricsLogger(tmp_path, [])
    assert logger.log_eval_problems(0, [{"problem": i, "correct": c} for i, c in enumerate([1, 0, 0, 1])]) == {}
    flips = logger.log_eval_problems(5, [{"problem": i, "correct": c} for i, c in enumerate([0, 1, 1, 1])])
    assert flips == {"eval/flipped_to_correct": 2.0, "eval/flipped_to_wrong": 1.0}
    rows = [json.loads(line) for line in (tmp_path / "eval_problems.jsonl").read_text().splitlines()]
    assert [(r["step"], r["problem"]) for r in rows][3:5] == [(0, 3), (5, 0)]


def test_hyperparameters_are_flattened_for_trackers():
    assert flatten({"a": {"b": 1, "c": [1, 2]}, "d": None, "e": {}}) == {"a.b": 1, "a.c": "[1, 2]", "d": "null", "e": "{}"}


def test_a_missing_tracker_library_names_the_sink_and_the_extra():
    with pytest.raises(ImportError, match=r"logging.sinks has 'neptune'.*rlxf\[tracking\]"):
        require("no_such_tracker_library", "neptune")


def test_an_unknown_sink_fails_at_start_up():
    from rlxf.checked_config import load_config
    from rlxf.config import ConfigError

    with pytest.raises(ConfigError, match="logging.sinks.*unknown metric sink.*'tensorbaord'"):
        load_config(None, ["logging.sinks=[console,tensorbaord]"])


def test_async_run_logs_each_samples_policy_version(tmp_path, tiny_model_dir):
    from rlxf.checked_config import load_config
    from rlxf.loops import get_loop
    from tests.conftest import small_overrides

    run_dir = tmp_path / "async"
    config = load_config(None, [*small_overrides(run_dir, tiny_model_dir, steps=3), "loop=rl_async", "sft.steps=0",
                                "threads=1", "async_rl.max_staleness=1", "logging.samples_every=1",
                                "logging.samples_per_step=16"])
    get_loop(config.loop)(config, write=lambda _: None)
    metrics = {r["step"]: r for r in map(json.loads, (run_dir / "metrics.jsonl").read_text().splitlines())}
    samples = [json.loads(line) for line in (run_dir / "samples.jsonl").read_text().splitlines()]
    assert sorted({s["step"] for s in samples}) == [1, 2, 3]
    for step in (1, 2, 3):  # the rows are the whole trained batch: their oldest version is the step's
        versions = [s["policy_version"] for s in samples if s["step"] == step]
        assert len(versions) == 16 and min(versions) == metrics[step]["async/oldest_version"]
