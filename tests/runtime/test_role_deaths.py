"""A role's process dying mid-step, for every role (runtime.kind=process: the same restart policy as the
Ray runtime, runtime/wire.py RESTARTABLE). Stateless roles (reward, reference) come back and the run
finishes; a trainer role (actor, critic) holds optimizer state, so the run stops naming the role, and
``--resume`` from the last checkpoint finishes it."""

from __future__ import annotations

import functools
import json

import pytest

from rlxf.checked_config import load_config
from rlxf.loops.rl import train_rl
from rlxf.runtime.process_runtime import ProcessRuntime, RoleProcessDied
from rlxf.train import checkpoint as ckpt
from tests.conftest import small_overrides
from tests.runtime.crashing_rollout import crashing_role

# role -> (the call it dies in, on which call of it: step 2's), extra overrides the role needs
ROLES = {
    "reward": ("score_batch:3", []),  # 1 = the initial evaluation, 2 = step 1, 3 = step 2
    "reference": ("compute_log_probs:2", ["algorithm.kl_coef=0.01"]),
    "actor": ("update:2", []),
    "critic": ("update:2", ["algorithm.name=ppo"]),
}


def run(run_dir, model_dir, role: str, steps: int = 3, resume: bool = False):
    _, extra = ROLES[role]
    overrides = [*small_overrides(run_dir, model_dir, steps=steps), "sft.steps=0", "runtime.kind=process",
                 f"runtime.process_roles=[{role}]", *extra]
    return train_rl(load_config(None, overrides), resume=resume, write=lambda _: None)


def crash_in(role: str, marker, monkeypatch) -> None:
    marker.write_text(ROLES[role][0])
    place = ProcessRuntime.place

    def place_crashing(self, name, factory, *args, **kwargs):
        if name == role:
            return place(self, name, functools.partial(crashing_role, factory), *args, **kwargs)
        return place(self, name, factory, *args, **kwargs)

    monkeypatch.setattr(ProcessRuntime, "place", place_crashing)


def metric_steps(run_dir) -> list[int]:
    return [json.loads(line)["step"] for line in (run_dir / "metrics.jsonl").read_text().splitlines()]


@pytest.mark.parametrize("role", ["reward", pytest.param("reference", marks=pytest.mark.slow)])
def test_a_stateless_role_is_restarted_and_the_run_finishes(tmp_path, sft_model_dir, crash_marker, monkeypatch, role):
    crash_in(role, crash_marker, monkeypatch)
    summary = run(tmp_path / role, sft_model_dir, role)
    assert not crash_marker.exists()  # its process did die
    assert summary["steps"] == 3 and metric_steps(tmp_path / role) == [0, 1, 2, 3]


@pytest.mark.parametrize("role", ["actor", pytest.param("critic", marks=pytest.mark.slow)])
def test_a_trainer_role_death_is_named_and_the_run_resumes(tmp_path, sft_model_dir, crash_marker, monkeypatch, role):
    run_dir = tmp_path / role
    crash_in(role, crash_marker, monkeypatch)
    with pytest.raises(RoleProcessDied, match=rf"role {role}: its process \(pid \d+\) died during update"):
        run(run_dir, sft_model_dir, role)
    assert not crash_marker.exists()
    assert ckpt.latest_valid_checkpoint(run_dir).name == "step_000001"  # step 1 intact, nothing of step 2
    monkeypatch.undo()
    assert run(run_dir, sft_model_dir, role, resume=True)["steps"] == 3
    assert metric_steps(run_dir) == [0, 1, 2, 3]
