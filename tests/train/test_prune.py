"""``rlxf prune RUNS_DIR``: lists what finished runs can lose (optimizer states of their checkpoints but the last,
checkpoints past their keep rules, unfinished writes) with sizes; ``--apply`` frees exactly that, and each finished
run's last checkpoint stays resumable. A run that is not finished is left alone. ``summary.json`` reports each
run's footprint."""

from __future__ import annotations

import json

from transformers import AutoModelForCausalLM

from rlxf.checked_config import load_config
from rlxf.cli import main
from rlxf.disk_space import folder_bytes, human_bytes
from rlxf.loops.rl import train_rl
from rlxf.train.checkpoint import checkpoint_problem, finished_checkpoints, is_resumable
from rlxf.train.prune import prune_plan
from tests.conftest import small_overrides


def _run(run_dir, model_dir, *extra) -> dict:
    overrides = [*small_overrides(run_dir, model_dir, steps=3), "sft.steps=0", "checkpoint.keep_last=2", *extra]
    return train_rl(load_config(None, overrides), write=lambda _: None)


def test_prune_frees_what_it_lists_and_the_last_checkpoint_still_resumes(tmp_path, tiny_model_dir, capsys):
    runs = tmp_path / "runs"
    _run(runs / "a", tiny_model_dir)
    _run(runs / "sweep" / "seed_0", tiny_model_dir, "checkpoint.keep_last=3")
    config = runs / "sweep" / "seed_0" / "config.yaml"  # the keep rule tightened since: one checkpoint is past it
    config.write_text(config.read_text().replace("keep_last: 3", "keep_last: 2"))
    _run(runs / "going", tiny_model_dir)
    with (runs / "going" / "metrics.jsonl").open("a") as metrics:  # resumed since its summary: not finished
        metrics.write(json.dumps({"step": 4, "reward/mean": 0.0}) + "\n")
    (runs / "a" / "checkpoints" / "step_000003.tmp").mkdir()  # a write that never finished (killed, then redone)
    (runs / "a" / "checkpoints" / "step_000003.tmp" / "state.json").write_text("{}")
    going_before = folder_bytes(runs / "going")

    items, unfinished = prune_plan(runs)
    a, seed = runs / "a" / "checkpoints", runs / "sweep" / "seed_0" / "checkpoints"
    assert [(item.path, item.whole) for item in items] == [
        (a / "step_000003.tmp", True), (a / "step_000002", False),
        (seed / "step_000001", True), (seed / "step_000002", False)]
    assert unfinished == [runs / "going"]
    listed = sum(item.bytes for item in items)
    before = folder_bytes(runs)
    assert main(["prune", str(runs)]) == 0
    out = capsys.readouterr().out
    assert f"{human_bytes(listed)} can be dropped in 4 places under {runs}" in out
    assert f"{human_bytes(items[1].bytes):>9}  {a / 'step_000002'}  optimizer state (the policy weights stay)" in out
    assert folder_bytes(runs) == before  # listing drops nothing

    assert main(["prune", str(runs), "--apply"]) == 0
    assert f"dropped {human_bytes(listed)} in 4 places under {runs}" in capsys.readouterr().out
    assert before - folder_bytes(runs) == listed  # exactly what it listed
    assert folder_bytes(runs / "going") == going_before
    assert prune_plan(runs)[0] == []
    for run in (a, seed):
        *earlier, last = finished_checkpoints(run.parent)
        assert is_resumable(last) and not any(is_resumable(c) for c in earlier)
        for checkpoint in (*earlier, last):
            assert checkpoint_problem(checkpoint) is None
        AutoModelForCausalLM.from_pretrained(earlier[-1] / "policy")
    summary = train_rl(load_config(None, [*small_overrides(runs / "a", tiny_model_dir, steps=4), "sft.steps=0"]),
                       resume=True, write=lambda _: None)
    assert summary["steps"] == 4


def test_summary_reports_the_runs_footprint(tmp_path, tiny_model_dir):
    run_dir = tmp_path / "run"
    summary = _run(run_dir, tiny_model_dir)
    assert json.loads((run_dir / "summary.json").read_text())["disk_bytes"] == summary["disk_bytes"]
    checkpoints = {c.name: folder_bytes(c) for c in finished_checkpoints(run_dir)}
    assert summary["checkpoint_bytes"] == checkpoints and len(checkpoints) == 3  # best (step 0), 2 and 3
    # the run folder as the summary was written: checkpoints, metrics, config (summary.json itself aside)
    assert summary["disk_bytes"] == folder_bytes(run_dir) - (run_dir / "summary.json").stat().st_size
    assert summary["disk_bytes"] > sum(checkpoints.values())
