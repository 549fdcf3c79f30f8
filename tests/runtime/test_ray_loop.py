"""The RL loop with every role a Ray actor (local cluster, 2 CPUs): the same numbers as in-process,
colocated and disaggregated, and a rollout actor killed mid-run is restarted and its prompts re-issued."""

from __future__ import annotations

import pytest

from tests.runtime.conftest import COMPARED, assert_same_run, crash_rollout_in_step_2, run_recipe


def test_disaggregated_roles_survive_a_killed_rollout_actor(ray_cluster, tmp_path, sft_model_dir, embedded_rows,
                                                            crash_marker, monkeypatch):
    crash_rollout_in_step_2(crash_marker, monkeypatch)
    rows = run_recipe(tmp_path, sft_model_dir, "ray", "runtime.kind=ray", "runtime.placement=disaggregated",
                      *COMPARED)
    assert not crash_marker.exists()  # the actor did die inside step 2's generate
    # Restarted, weights replayed, the same prompts re-issued with the same generator state: every
    # trajectory of every step is there once — the run is the in-process run, number for number.
    assert_same_run(rows, embedded_rows)


@pytest.mark.slow
def test_colocated_roles_match_the_embedded_run(ray_cluster, tmp_path, sft_model_dir, embedded_rows):
    rows = run_recipe(tmp_path, sft_model_dir, "colocated", "runtime.kind=ray", "runtime.placement=colocated",
                      *COMPARED, "algorithm.kl_coef=0.01")
    assert rows[-1]["samples"] == embedded_rows[-1]["samples"]
    assert "policy/kl" in rows[1]  # the reference role ran as an actor too


def test_custom_placement_map_groups_roles_into_bundles(ray_cluster):
    """``runtime.placement: {role: group}``: the named roles share a bundle sized for their actors, the
    others get one each, and the Ray placement group holds exactly those bundles, spread."""
    from ray.util.placement_group import placement_group_table

    from rlxf.checked_config import load_config
    from rlxf.runtime.ray_runtime import RayRuntime

    config = load_config(None, ["runtime.kind=ray", "runtime.placement={rollout: gen, reward: gen, actor: train}",
                                "runtime.cpus_per_role=0.25"])
    assert config.runtime.groups() == {"rollout": "gen", "reward": "gen", "reference": "reference",
                                       "teacher": "teacher", "actor": "train", "critic": "critic"}
    runtime = RayRuntime(config)  # no bundle for the teacher: this run's estimator reads none
    try:
        table = placement_group_table(runtime.placement_group)
        bundles = {name: table["bundles"][index] for name, index in runtime.bundle_of.items()}
        assert bundles == {"critic": {"CPU": 0.25}, "gen": {"CPU": 0.5}, "reference": {"CPU": 0.25},
                           "train": {"CPU": 0.25}}
        assert table["strategy"] == "SPREAD"
    finally:
        runtime.close()
    with pytest.raises(ValueError, match=r"unknown roles \['judge'\]"):
        load_config(None, ["runtime.placement={rollout: gen, judge: gen}"]).runtime.groups()
