"""Shared by the data-parallel Ray loop tests (any ``train.backend``): the shrunk default recipe with a
training signal, run embedded (``SINGLE``) or on Ray, resumed with ``rlxf train --resume``, and the
comparisons of a run's metrics and saved policy with the single-process run's."""

from __future__ import annotations

import json
import shutil

import pytest
from safetensors.torch import load_file

from rlxf.checked_config import load_config
from rlxf.cli import main
from rlxf.loops.rl import train_rl
from tests.conftest import assert_trains, small_overrides

TOL = 1e-4  # absolute, on every logged metric (float32; ranks reduce gradients in another order)
# Clip fractions count tokens past a threshold: a 1e-7 difference moves a token that sits on the boundary.
# Seen: PPO's critic/value_clip_fraction at step 2, 2/160 against 1/160, every other metric within 4e-7 (a
# rank's micro-batch joins the others' full forward where the single process shared its prompt). One token of
# a step's ~160 loss tokens is allowed there, no more.
CLIP_FRACTION_TOL = 1 / 150
# Enough SFT for non-zero rewards (so advantages, losses and updates are not all zero), and two
# optimizer steps per RL step so the group's compute_log_probs (old log-probs) runs too.
SIGNAL = ["sft.steps=40", "train.mini_batch_size=8", "train.micro_batch_size=4"]
SINGLE = ["runtime.kind=embedded", "train.backend=single", "train.world_size=1"]


def metrics(run_dir) -> list[dict]:
    rows = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    return [{k: v for k, v in r.items() if not k.startswith("time/")} for r in rows]


def run(run_dir, model_dir, steps: int, *extra: str) -> list[dict]:
    train_rl(load_config(None, [*small_overrides(run_dir, model_dir, steps=steps), *SIGNAL, *extra]),
             write=lambda _: None)
    return metrics(run_dir)


def resume(source, run_dir, steps: int, *extra: str) -> list[dict]:
    """``rlxf train --resume`` on a copy of ``source`` with the last checkpoint of step ``steps - 1``."""
    shutil.copytree(source, run_dir)
    assert main(["train", "--resume", str(run_dir), f"train.steps={steps}", *extra]) == 0
    return metrics(run_dir)


def assert_rows_match(rows: list[dict], expected: list[dict]) -> None:
    assert_trains(expected)  # equal numbers of a run that trains, not equal zeros
    assert [r["step"] for r in rows] == [r["step"] for r in expected]
    for row, want in zip(rows, expected):
        assert row.keys() == want.keys()
        assert {k: v for k, v in row.items() if k.startswith("reward/")} == \
            {k: v for k, v in want.items() if k.startswith("reward/")}  # same sampled tokens
        counts = {k for k in want if k.endswith("clip_fraction")}
        assert {k: v for k, v in row.items() if k not in counts} == \
            pytest.approx({k: v for k, v in want.items() if k not in counts}, abs=TOL, nan_ok=True)
        assert {k: row[k] for k in counts} == pytest.approx({k: want[k] for k in counts}, abs=CLIP_FRACTION_TOL)


def assert_same_policy(run_a, run_b, step: int) -> None:
    path = f"checkpoints/step_{step:06d}/policy/model.safetensors"
    a, b = load_file(run_a / path), load_file(run_b / path)
    assert a.keys() == b.keys()
    worst = max(float((a[k] - b[k]).abs().max()) for k in a)
    assert worst < 1e-5, worst
