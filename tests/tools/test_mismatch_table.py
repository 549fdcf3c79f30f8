"""tools/mismatch_table.py: per-seed figures from metrics.jsonl and their reduction over seeds."""

import json
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parents[2] / "tools"))
import mismatch_table  # noqa: E402


def _seed(folder: Path, evals: list[float], diffs: list[float], diff_maxes: list[float]) -> None:
    folder.mkdir(parents=True)
    rows = [{"step": 0, "eval/accuracy": evals[0]}]
    rows += [{"step": i + 1, "policy/rollout_log_prob_diff": d, "policy/rollout_log_prob_diff_max": m}
             for i, (d, m) in enumerate(zip(diffs, diff_maxes))]
    rows.append({"step": len(diffs), "eval/accuracy": evals[1]})
    (folder / "metrics.jsonl").write_text("\n".join(json.dumps(r) for r in rows) + "\n")


def test_seeds_are_averaged_and_the_largest_gap_is_the_largest_of_any_seed(tmp_path):
    _seed(tmp_path / "none" / "seed_0", [0.2, 0.8], [0.1, 0.3], [1.0, 7.5])
    _seed(tmp_path / "none" / "seed_1", [0.1, 0.5], [0.2, 0.2], [2.0, 3.0])
    mode = mismatch_table.mode_summary(tmp_path / "none", "eval/accuracy")
    seed_0 = mode["seeds"]["seed_0"]
    assert seed_0["gain"] == pytest.approx(0.6) and seed_0["diff_mean"] == pytest.approx(0.2)
    assert seed_0["diff_max"] == 7.5 and seed_0["kl_k3"] is None
    mean = mode["mean"]
    assert mean["initial"] == pytest.approx(0.15) and mean["final"] == pytest.approx(0.65)
    assert mean["diff_mean"] == pytest.approx(0.2)  # (0.2 + 0.2) / 2
    assert mean["diff_max"] == 7.5  # the max over seeds, not the mean of 7.5 and 3.0
    assert mode["every_seed_improved"] is True
    assert "| `none` | 0.150 | 0.650 | +0.60 / +0.40 | 0.2000 | 7.50 |" in mismatch_table.markdown([mode])
