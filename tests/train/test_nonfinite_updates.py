"""A NaN/inf loss or gradient: the optimizer step is skipped (weights and optimizer state unchanged),
counted, and a few in a row stop the run; no checkpoint ever holds a NaN weight."""

import json

import pytest
import torch
from safetensors.torch import load_file

from rlxf.checked_config import load_config
from rlxf.config import OptimConfig
from rlxf.loops.rl import train_rl
from rlxf.train.engine import NonFiniteUpdateError, TrainEngine
from tests.conftest import small_overrides


def engine_and_step(max_in_a_row: int = 3):
    model = torch.nn.Linear(2, 1)
    engine = TrainEngine(model, OptimConfig(lr=0.1, max_nonfinite_in_a_row=max_in_a_row))

    def step(value: float) -> dict[str, float]:
        x = torch.tensor([[1.0, 2.0]])
        return engine.optimizer_step([x], lambda micro: ((model(micro) * value).sum(), {}))

    return model, engine, step


def test_a_nonfinite_step_changes_nothing_and_is_counted():
    model, engine, step = engine_and_step()
    assert step(1.0)["skipped_nonfinite"] == 0.0
    weights = {k: v.clone() for k, v in model.state_dict().items()}
    adam_steps = [s["step"].item() for s in engine.optimizer.state.values()]
    for bad in (float("nan"), float("inf")):
        metrics = step(bad)
        assert metrics["skipped_nonfinite"] == 1.0
        for name, value in model.state_dict().items():
            assert torch.equal(value, weights[name])
        assert [s["step"].item() for s in engine.optimizer.state.values()] == adam_steps  # Adam did not step
        assert all(p.grad is None for p in model.parameters())  # nothing leaks into the next step
    assert engine.nonfinite_in_a_row == 2
    assert step(1.0)["skipped_nonfinite"] == 0.0 and engine.nonfinite_in_a_row == 0  # a finite step resets it
    assert engine.nonfinite_total == 2


def test_a_finite_loss_with_a_nonfinite_gradient_is_skipped():
    model, engine, _ = engine_and_step()
    x = torch.tensor([[1.0, 2.0]])
    weights = {k: v.clone() for k, v in model.state_dict().items()}
    # sqrt at 0 has an infinite derivative, the loss value 0 is finite
    metrics = engine.optimizer_step([x], lambda micro: (torch.sqrt(model(micro).sum() * 0), {}))
    assert metrics["skipped_nonfinite"] == 1.0 and metrics["loss"] == 0.0
    assert all(torch.equal(v, weights[k]) for k, v in model.state_dict().items())


def test_n_in_a_row_stop_with_a_clear_message():
    _, _, step = engine_and_step(max_in_a_row=3)
    step(float("nan"))
    step(float("nan"))
    with pytest.raises(NonFiniteUpdateError, match=r"3 optimizer steps in a row had a non-finite loss or gradient"):
        step(float("nan"))


def test_a_diverging_run_stops_and_keeps_only_finite_checkpoints(tmp_path, tiny_model_dir):
    """lr 1e30: the first update blows the weights up to ~1e30 (finite), every later loss is NaN/inf."""
    run_dir = tmp_path / "diverge"
    said = []
    config = load_config(None, [*small_overrides(run_dir, tiny_model_dir, steps=6), "sft.steps=0",
                                "reward.function=tests.core.helpers:length_reward", "train.optim.lr=1e30", "train.optim.max_nonfinite_in_a_row=2"])
    with pytest.raises(NonFiniteUpdateError, match="2 optimizer steps in a row"):
        train_rl(config, write=said.append)
    rows = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    assert any(r.get("policy/skipped_nonfinite") for r in rows)
    assert any("non-finite loss or gradient and were skipped" in line for line in said)
    for checkpoint in (run_dir / "checkpoints").glob("step_*"):
        for tensor in load_file(checkpoint / "policy" / "model.safetensors").values():
            assert torch.isfinite(tensor).all(), checkpoint.name
