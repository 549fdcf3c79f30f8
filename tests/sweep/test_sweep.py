"""The seed sweep end to end on two seeds of a small run, and its report against hand-made curves."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from rlxf.sweep.report import markdown_table, recipe_row, summarize
from rlxf.sweep.runs import SeedRun, seed_overrides
from tests.conftest import small_overrides


def _run(seed, curve, rc=0):
    return SeedRun(seed, Path(f"/x/seed_{seed}"), rc, 10.0, curve)


def test_summary_numbers_by_hand():
    runs = [_run(0, [(0, 0.5), (10, 0.7), (20, 0.6)]), _run(1, [(0, 0.4), (10, 0.5), (20, 0.8)]),
            _run(2, [], rc=1)]
    s = summarize(runs, "eval/accuracy")
    assert [r["gain"] for r in s["per_seed"]] == pytest.approx([0.1, 0.4])
    assert s["final"]["mean"] == pytest.approx(0.7) and s["final"]["std"] == pytest.approx(0.1414213, rel=1e-5)
    assert s["best"]["mean"] == pytest.approx(0.75)
    assert s["per_seed"][0]["best_step"] == 10
    assert s["worst_seed"] == {"seed": 0, "gain": pytest.approx(0.1)}
    assert s["every_seed_improved"] is False  # seed 2 failed
    assert s["failed"][0]["seed"] == 2
    table = markdown_table(s)
    assert "| 0 | 0.500 | 0.600 | 0.700 (10) | +0.100 |" in table and "seed 2 failed" in table
    assert [r["steps"] for r in s["per_seed"]] == [20, 20]
    # gains 0.1 and 0.4: mean 0.25, sample std 0.2121
    assert recipe_row("grpo", s) == ("| grpo | `eval/accuracy` | 20 | 0.450 | 0.700 | +0.250 ± 0.212 | "
                                     "+0.100 (seed 0) (1 seeds failed) |")


def test_seed_overrides_fill_in_the_seed():
    per_seed = ["model.path=sft/seed_{seed}/checkpoints/step_000300/policy", "reward.kwargs.path=rm/{seed}/{seed}"]
    assert seed_overrides(per_seed, 3) == ["model.path=sft/seed_3/checkpoints/step_000300/policy",
                                           "reward.kwargs.path=rm/3/3"]


def test_two_seeds_through_the_command_line(tmp_path, tiny_model_dir):
    out = tmp_path / "sweep"
    # each seed starts from its own model folder (--per-seed), as sweeps over one SFT run per seed do
    for seed in (0, 1):
        (tmp_path / "starts").mkdir(exist_ok=True)
        (tmp_path / "starts" / f"seed_{seed}").symlink_to(tiny_model_dir)
    overrides = [o for o in small_overrides(tmp_path / "unused", tiny_model_dir, steps=2)
                 if not o.startswith(("run_dir", "model.path", "eval.every"))] + ["eval.every=1", "sft.steps=3"]
    cmd = [sys.executable, "-m", "rlxf.cli", "sweep", *overrides, "--seeds", "2", "--parallel", "2",
           "--per-seed", f"model.path={tmp_path}/starts/seed_{{seed}}", "--out", str(out)]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=900)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    summary = json.loads((out / "sweep.json").read_text())
    assert summary["seeds"] == [0, 1] and len(summary["per_seed"]) == 2
    for row, seed in zip(summary["per_seed"], (0, 1)):
        curve = [(r["step"], r["eval/accuracy"]) for r in map(json.loads, (out / f"seed_{seed}" / "metrics.jsonl")
                 .read_text().splitlines()) if "eval/accuracy" in r]
        assert row["final"] == curve[-1][1] and row["best"] == max(v for _, v in [(0, row["initial"]), *curve])
    assert summary["final"]["mean"] == pytest.approx(sum(r["final"] for r in summary["per_seed"]) / 2)
    # the seeds differ (data order, sampling, SFT start)
    configs = [(out / f"seed_{s}" / "config.yaml").read_text() for s in (0, 1)]
    assert "seed: 0" in configs[0] and "seed: 1" in configs[1]
    assert f"{tmp_path}/starts/seed_0\n" in configs[0] and f"{tmp_path}/starts/seed_1\n" in configs[1]
    assert (out / "sweep.png").stat().st_size > 10_000 and (out / "sweep.md").exists()


def test_a_wrong_key_fails_once_before_any_seed(tmp_path):
    cmd = [sys.executable, "-m", "rlxf.cli", "sweep", "train.stpes=3", "--seeds", "2", "--out", str(tmp_path)]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2 and "train.stpes" in proc.stderr
    assert not list(tmp_path.glob("seed_*"))


def test_a_per_seed_override_without_the_seed_is_refused(tmp_path):
    cmd = [sys.executable, "-m", "rlxf.cli", "sweep", "--per-seed", "model.path=runs/sft", "--out", str(tmp_path)]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2 and "rlxf: --per-seed model.path=runs/sft" in proc.stderr and "{seed}" in proc.stderr


def test_the_table_shows_each_seeds_disk_footprint_and_the_total():
    runs = [SeedRun(0, Path("/x/seed_0"), 0, 10.0, [(0, 0.5), (10, 0.7)], disk_bytes=1_500_000_000),
            SeedRun(1, Path("/x/seed_1"), 0, 10.0, [(0, 0.4), (10, 0.6)], disk_bytes=250_000_000)]
    s = summarize(runs, "eval/accuracy")
    assert [row["disk_bytes"] for row in s["per_seed"]] == [1_500_000_000, 250_000_000]
    assert s["disk_bytes"] == 1_750_000_000
    table = markdown_table(s)
    assert "| 0 | 0.500 | 0.700 | 0.700 (10) | +0.200 | 1,500.0 |" in table
    assert "| +0.200 ± 0.000 | 1,750.0 |" in table
