"""PPO's ratio extremes are reported as extremes over micro-batches and optimizer steps."""

from __future__ import annotations

import torch

from rlxf.config import OptimConfig
from rlxf.loops.rl import mean_of
from rlxf.tracking.reduce import reduce_metrics
from rlxf.train.engine import TrainEngine


def test_extremes_stay_extremes_the_rest_averages():
    history = [{"ratio_max": 1.2, "ratio_min": 0.9, "approx_kl": 0.01},
               {"ratio_max": 1.5, "ratio_min": 0.7, "approx_kl": 0.03}]
    assert reduce_metrics(history) == {"ratio_max": 1.5, "ratio_min": 0.7, "approx_kl": 0.02}
    assert mean_of(history, "policy") == {"policy/ratio_max": 1.5, "policy/ratio_min": 0.7, "policy/approx_kl": 0.02}


def test_optimizer_step_reports_the_largest_ratio_of_its_micro_batches():
    model = torch.nn.Linear(2, 1)
    engine = TrainEngine(model, OptimConfig())
    per_micro = iter([{"ratio_max": 1.1, "ratio_min": 0.95, "clip_fraction": 0.0},
                      {"ratio_max": 3.0, "ratio_min": 0.4, "clip_fraction": 0.5}])

    def loss_of(micro):
        return model(micro).sum() * 0.0, next(per_micro)

    out = engine.optimizer_step([torch.ones(1, 2), torch.ones(1, 2)], loss_of)
    assert out["ratio_max"] == 3.0 and out["ratio_min"] == 0.4 and out["clip_fraction"] == 0.25


def test_data_parallel_ranks_merge_extremes_as_extremes():
    from rlxf.runtime.dp_split import merge_step_metrics

    rank0 = [{"loss": 0.5, "grad_norm": 2.0, "lr": 1e-4, "ratio_max": 1.14, "ratio_min": 0.90, "clip_fraction": 0.2}]
    rank1 = [{"loss": 0.5, "grad_norm": 2.0, "lr": 1e-4, "ratio_max": 1.02, "ratio_min": 0.85, "clip_fraction": 0.4}]
    merged = merge_step_metrics([rank0, rank1])[0]
    assert (merged["ratio_max"], merged["ratio_min"], merged["loss"]) == (1.14, 0.85, 0.5)
    assert abs(merged["clip_fraction"] - 0.3) < 1e-12
