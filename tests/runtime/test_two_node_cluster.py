"""The RL loop on a simulated two-node Ray cluster (``ray.cluster_utils.Cluster``: a head and a worker
node, 1 CPU each, told apart by a custom resource), joined through ``runtime.address`` like a real one.

The nodes start without the driver's ``PYTHONPATH``, as another machine would: their workers import
this checkout and the test modules only through the runtime env that ``connect`` sends. No dashboard.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

import pytest

from tests.runtime.conftest import COMPARED, assert_same_run, crash_rollout_in_step_2, run_recipe

HEAD, WORKER = "rlxf_test_head_node", "rlxf_test_worker_node"  # custom resources, one per node


@dataclass
class Nodes:
    address: str
    head: str
    worker: str


@pytest.fixture(scope="module")
def two_nodes(crash_marker):
    """Head + worker node. Each run joins it through ``runtime.address`` and leaves it at the end."""
    ray = pytest.importorskip("ray", reason="ray is not installed (pip install -e '.[ray]')")
    from ray.cluster_utils import Cluster

    assert not ray.is_initialized()
    os.environ.setdefault("RAY_AUTH_MODE", "disabled")
    node_env = {"PYTHONPATH": ""}  # as on another machine: nothing inherited from the driver
    cluster = Cluster(initialize_head=True, head_node_args={
        "num_cpus": 1, "resources": {HEAD: 1}, "include_dashboard": False, "env_vars": node_env})
    try:
        worker = cluster.add_node(num_cpus=1, resources={WORKER: 1}, env_vars=node_env)
        yield Nodes(cluster.address, head=cluster.head_node.node_id, worker=worker.node_id)
    finally:
        ray.shutdown()  # a failed run may have left the driver connected
        cluster.shutdown()


@pytest.fixture
def placed(monkeypatch) -> dict:
    """Filled when the run's runtime closes: each role's node, its bundle's node, its restarts."""
    from ray.util.placement_group import placement_group_table

    from rlxf.runtime.ray_runtime import RayRuntime

    seen: dict = {}
    close = RayRuntime.close

    def recording_close(self):
        bundle_nodes = placement_group_table(self.placement_group)["bundles_to_node_id"]
        for role, proxy in self.proxies.items():
            seen[role] = {"node": proxy.node_id(), "restarts": proxy.restarts,
                          "bundle_node": bundle_nodes[self.bundle_of[self.groups[role]]]}
        seen["bundle_nodes"] = set(bundle_nodes.values())
        close(self)

    monkeypatch.setattr(RayRuntime, "close", recording_close)
    return seen


def pin_rollout_to(resource: str, monkeypatch) -> None:
    """The rollout role's bundle also asks for a sliver of ``resource``: it lands on that node."""
    from rlxf.runtime.ray_runtime import RayRuntime

    bundle = RayRuntime._bundle

    def pinned(self, group, *args, **kwargs):
        out = bundle(self, group, *args, **kwargs)
        return {**out, resource: 0.01} if group == self.groups["rollout"] else out

    monkeypatch.setattr(RayRuntime, "_bundle", pinned)


def role_nodes(placed: dict) -> dict[str, str]:
    roles = {role: p["node"] for role, p in placed.items() if role != "bundle_nodes"}
    assert {"rollout", "reward", "actor"} <= set(roles)
    for role in roles:  # each actor runs where its bundle was placed
        assert placed[role]["node"] == placed[role]["bundle_node"], role
    return roles


def ray_run(tmp_path, model_dir, nodes: Nodes, name: str, *extra: str) -> list[dict]:
    rows = run_recipe(tmp_path, model_dir, name, "runtime.kind=ray", f"runtime.address={nodes.address}",
                      *COMPARED, *extra)
    import ray

    assert not ray.is_initialized()  # the runtime joined the cluster for the run only
    return rows


def test_disaggregated_roles_spread_over_both_nodes(two_nodes, placed, tmp_path, sft_model_dir, embedded_rows):
    rows = ray_run(tmp_path, sft_model_dir, two_nodes, "spread", "runtime.placement=disaggregated")
    # Five bundles of 0.25 CPU do not fit one 1-CPU node; SPREAD alternates them over the nodes, so the
    # roles of the default recipe (rollout, reward, actor) end up on both.
    assert placed["bundle_nodes"] == {two_nodes.head, two_nodes.worker}
    assert set(role_nodes(placed).values()) == {two_nodes.head, two_nodes.worker}
    assert_same_run(rows, embedded_rows)


def test_colocated_roles_share_one_node(two_nodes, placed, tmp_path, sft_model_dir, embedded_rows):
    # 0.2 CPU x 5 roles: the one bundle fits a 1-CPU node, and PACK keeps it on one.
    rows = ray_run(tmp_path, sft_model_dir, two_nodes, "pack", "runtime.placement=colocated",
                   "runtime.cpus_per_role=0.2")
    assert len(set(role_nodes(placed).values())) == 1
    assert_same_run(rows, embedded_rows)


def test_rollout_actor_killed_on_the_worker_node_is_survived(two_nodes, placed, tmp_path, sft_model_dir,
                                                             embedded_rows, crash_marker, monkeypatch):
    pin_rollout_to(WORKER, monkeypatch)
    crash_rollout_in_step_2(crash_marker, monkeypatch)
    rows = ray_run(tmp_path, sft_model_dir, two_nodes, "kill", "runtime.placement=disaggregated")
    assert not crash_marker.exists()  # the rollout process did SIGKILL itself inside step 2's generate
    assert placed["rollout"]["restarts"] == 1
    assert placed["rollout"]["node"] == two_nodes.worker  # restarted in its bundle, on the worker node
    # The re-issued prompts gave the same trajectories: nothing lost or duplicated, number for number.
    assert_same_run(rows, embedded_rows)
