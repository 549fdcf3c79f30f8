"""The Ray runtime: every role an actor on one placement group; the loop gets ``RoleProxy`` handles.

Placement (``runtime.placement``): roles in the same group share one bundle (colocated: they
time-share its CPUs/GPUs), each group is its own bundle (disaggregated: own devices). The placement
group is PACKed when roles are colocated and SPREAD over nodes when disaggregated, unless
``runtime.strategy`` says otherwise. A bundle holds ``cpus_per_role`` (and ``gpus_per_role``) for each
role of its group — for each *rank* of the trainer roles, which ``train.world_size > 1`` makes groups
of rank actors in their role's bundle (``runtime/group_proxy.py``).
"""

from __future__ import annotations

import os
import sys

import ray
from ray.exceptions import ActorUnavailableError, RayActorError
from ray.util.placement_group import placement_group, remove_placement_group
from ray.util.scheduling_strategies import PlacementGroupSchedulingStrategy

from rlxf.runtime import RUNTIMES
from rlxf.runtime.group_proxy import RoleGroupProxy
from rlxf.runtime.proxy import RoleProxy
from rlxf.runtime.wire import RESTARTABLE
from rlxf.runtime.worker import RoleWorker

DATA_PARALLEL = {"actor", "critic"}  # trainer roles: train.world_size ranks each


def connect(address: str | None, num_cpus: float | None = None) -> bool:
    """Join ``address`` or start a local cluster; True when this call started Ray (and must stop it)."""
    if ray.is_initialized():
        return False
    os.environ.setdefault("RAY_AUTH_MODE", "disabled")
    # Workers import the driver's modules (user rewards, tests, a source checkout) from its sys.path.
    paths = [p for p in sys.path if p and os.path.isdir(p)]
    if address is None:
        env = {"PYTHONPATH": os.pathsep.join(paths)}
        # "local": always a fresh cluster for this run, never one that happens to run on this machine.
        ray.init(address="local", num_cpus=num_cpus, include_dashboard=False, log_to_driver=False, runtime_env={"env_vars": env})
    else:
        # On other nodes: the driver's own folders (the same paths on a shared filesystem; ignored where
        # missing) ahead of the node's PYTHONPATH; the interpreter's folders are the node's own business.
        prefixes = {os.path.realpath(p) for p in (sys.prefix, sys.base_prefix, sys.exec_prefix)}
        own = [p for p in paths if not any(_is_under(p, prefix) for prefix in prefixes)]
        env = {"PYTHONPATH": os.pathsep.join([*own, "${PYTHONPATH}"])}
        ray.init(address=address, log_to_driver=False, runtime_env={"env_vars": env})
    return True


def _is_under(path: str, folder: str) -> bool:
    path = os.path.realpath(path)
    return path == folder or path.startswith(folder.rstrip(os.sep) + os.sep)


@RUNTIMES.register("ray")
class RayRuntime:
    def __init__(self, config) -> None:
        self.config = config
        self.rcfg = config.runtime
        self.started_ray = connect(self.rcfg.address)
        # the teacher reserves its share only in a run whose advantage estimator reads it (distillation)
        self.groups = {role: group for role, group in self.rcfg.groups().items()
                       if role != "teacher" or config.algorithm.uses_teacher}
        self._actors_per_group = {
            g: sum(self.ranks(r) for r in self.groups if self.groups[r] == g) for g in set(self.groups.values())
        }
        names = sorted(set(self.groups.values()))
        self.bundle_of = {name: i for i, name in enumerate(names)}
        bundles = [self._bundle(name) for name in names]
        strategy = self.rcfg.strategy or ("PACK" if self.rcfg.placement == "colocated" else "SPREAD")
        self.placement_group = placement_group(bundles, strategy=strategy)
        ray.get(self.placement_group.ready(), timeout=120)
        self.proxies: dict[str, RoleProxy | RoleGroupProxy] = {}

    def ranks(self, role: str) -> int:
        return self.config.train.world_size if role in DATA_PARALLEL else 1

    def _bundle(self, group: str) -> dict[str, float]:
        count = self._actors_per_group[group]
        bundle = {"CPU": self.rcfg.cpus_per_role * count}
        if self.rcfg.gpus_per_role:
            bundle["GPU"] = self.rcfg.gpus_per_role * count
        return bundle

    def place(self, role: str, factory, *args, **kwargs) -> RoleProxy | RoleGroupProxy:
        restartable = role in RESTARTABLE
        options = {
            "num_cpus": self.rcfg.cpus_per_role,
            "num_gpus": self.rcfg.gpus_per_role,
            "max_restarts": self.rcfg.max_restarts if restartable else 0,
            "name": None,
            "scheduling_strategy": PlacementGroupSchedulingStrategy(
                self.placement_group, placement_group_bundle_index=self.bundle_of[self.groups[role]]
            ),
        }
        # The proxy holds this reference: a restarted actor re-reads its constructor arguments from it
        # (Ray drops arguments nobody references: ray-project/ray#53727).
        spec = ray.put((factory, args, kwargs))
        threads = self.config.threads or 1
        if self.ranks(role) > 1:
            proxy = RoleGroupProxy.start(role, spec, self.ranks(role), threads, options)
        else:
            actor = ray.remote(RoleWorker).options(**options).remote(spec, threads)
            proxy = RoleProxy(role, actor, restartable, max_retries=self.rcfg.max_restarts, keep_alive=spec)
        self.proxies[role] = proxy
        return proxy

    def attach(self, proxy: RoleProxy, factory, *args, **kwargs) -> RoleProxy:
        """``factory(role, *args)`` built inside the actor of the role behind ``proxy``."""
        return proxy.attach(factory, *args, **kwargs)

    def revive(self, proxy: RoleProxy, error: BaseException) -> bool:
        """True when ``error`` is ``proxy``'s actor dying and Ray restarted it (state replayed)."""
        return isinstance(error, (RayActorError, ActorUnavailableError)) and proxy.wait_restarted()

    def portable(self, role, config):
        """What stands for ``role`` inside another actor: its proxy (actor handles pickle)."""
        return role

    def close(self) -> None:
        for proxy in self.proxies.values():
            proxy.kill()
        self.proxies.clear()
        remove_placement_group(self.placement_group)
        if self.started_ray:
            ray.shutdown()
