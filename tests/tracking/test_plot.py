"""``rlxf plot``: the PNG's size and shape, and the numbers behind its panels."""

import json

import pytest

from rlxf.cli import main
from rlxf.tracking.plot import PANELS, panel_keys, run_names, stage_seconds
from tests.conftest import small_overrides

pytest.importorskip("matplotlib")


def write_run(run_dir, steps: int, alarm_at: int | None = None, kl: str = "policy/kl"):
    run_dir.mkdir(parents=True)
    rows = [{"step": 0, "eval/accuracy": 0.2}]
    for step in range(1, steps + 1):
        rows.append({
            "step": step, "reward/mean": 0.1 * step, "reward/correct": 0.05 * step, "reward/format": 0.5,
            kl: 0.01 * step, "policy/entropy": 2.0 - 0.1 * step, "response/length_mean": 5.0,
            "policy/clip_fraction": 0.02, "monitor/alarm": float(step == alarm_at),
            "time/generation": 0.5, "time/train": 0.25, "time/step": 0.8, "time/weight_sync_seconds": 0.01,
            **({"eval/accuracy": 0.2 + 0.01 * step} if step % 5 == 0 else {}),
        })
    (run_dir / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))


def test_plot_of_two_runs_is_one_png_of_the_expected_shape(tmp_path, capsys):
    from matplotlib.image import imread

    write_run(tmp_path / "a" / "grpo", 20, alarm_at=12)
    write_run(tmp_path / "b" / "grpo", 10, kl="policy/approx_kl")
    out = tmp_path / "both.png"
    assert main(["plot", str(tmp_path / "a" / "grpo"), str(tmp_path / "b" / "grpo"), "-o", str(out)]) == 0
    assert capsys.readouterr().out.strip() == str(out)
    image = imread(out)
    assert image.shape[:2] == (720, 1600)  # 2 x 4 panels, 20 x 9 inches at 80 dpi
    assert out.stat().st_size > 50_000  # curves, labels and legends, not a blank canvas
    assert image[..., :3].std() > 0.05


def test_one_run_plot_goes_next_to_its_metrics(tmp_path):
    write_run(tmp_path / "run", 3)
    assert main(["plot", str(tmp_path / "run")]) == 0
    assert (tmp_path / "run" / "plots.png").stat().st_size > 20_000


def test_a_directory_without_metrics_is_named(tmp_path, capsys):
    (tmp_path / "empty").mkdir()
    assert main(["plot", str(tmp_path / "empty")]) == 2
    assert f"no metrics.jsonl in {tmp_path / 'empty'}" in capsys.readouterr().err


def test_panel_keys_stage_times_and_names(tmp_path):
    rows = [{"step": 0}, {"step": 1, "reward/mean": 1, "reward/correct": 1, "policy/approx_kl": 0.1, "policy/kl": 0.2,
                          "time/generation": 1.0, "time/train": 3.0, "time/step": 4.5},
            {"step": 2, "time/generation": 2.0, "time/train": 1.0, "time/step": 3.5}]
    reward, _, kl = PANELS[:3]
    assert panel_keys(reward, rows) == ["reward/mean", "reward/correct"]
    assert panel_keys(kl, rows) == ["policy/kl"]  # the reference KL when there is one
    assert stage_seconds(rows) == {"generation": 1.5, "train": 2.0}
    assert run_names([tmp_path / "x" / "run", tmp_path / "y" / "run", tmp_path / "z"]) == ["x/run", "y/run", "z"]


def test_rlxf_train_writes_plots_next_to_summary(tmp_path, tiny_model_dir, capsys):
    from matplotlib.image import imread

    run_dir = tmp_path / "run"
    assert main(["train", *small_overrides(run_dir, tiny_model_dir, steps=2), "threads=1"]) == 0
    assert f"plots: {run_dir / 'plots.png'}" in capsys.readouterr().out
    assert (run_dir / "summary.json").exists() and imread(run_dir / "plots.png").shape[:2] == (720, 1600)
    assert main(["train", *small_overrides(tmp_path / "quiet", tiny_model_dir, steps=1), "logging.plot=false"]) == 0
    assert not (tmp_path / "quiet" / "plots.png").exists()
