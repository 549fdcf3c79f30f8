"""summary.json reports the best held-out accuracy and its step beside the final one, in every loop."""

from __future__ import annotations

import json

import pytest

from rlxf.checked_config import load_config
from rlxf.loops import get_loop
from rlxf.loops.run_state import RunState
from tests.conftest import small_overrides


def test_record_eval_keeps_the_earliest_best():
    state = RunState()
    for step, acc in [(0, 0.5), (10, 0.7), (20, 0.7), (30, 0.6)]:
        state.record_eval(step, {"eval/accuracy": acc})
    assert (state.best_eval_accuracy, state.best_eval_step) == (0.7, 10)
    assert state.last_eval == {"eval/accuracy": 0.6}


@pytest.mark.parametrize("loop", ["rl", "sft"])
def test_summary_best_matches_the_logged_evaluations(tmp_path, tiny_model_dir, loop):
    run = tmp_path / loop
    overrides = small_overrides(run, tiny_model_dir, steps=3) + [f"loop={loop}", "eval.every=1", "sft.steps=4"]
    summary = get_loop(loop)(load_config(None, overrides), write=lambda _: None)
    evals = [(r["step"], r["eval/accuracy"]) for r in map(json.loads, (run / "metrics.jsonl").read_text().splitlines())
             if "eval/accuracy" in r]
    assert len(evals) >= 3
    best = max(evals, key=lambda sv: (sv[1], -sv[0]))
    assert (summary["best_eval_accuracy"], summary["best_eval_step"]) == (best[1], best[0])
    assert summary["final_eval_accuracy"] == evals[-1][1]
    assert json.loads((run / "summary.json").read_text())["best_eval_step"] == best[0]
