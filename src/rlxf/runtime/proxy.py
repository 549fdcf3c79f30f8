"""A role behind a Ray actor, called exactly like the role itself: ``proxy.method(args)`` runs
``ray.get(actor.call.remote("method", args))`` and applies the call's in-place effects locally.

Restartable roles (rollout, reward, reference: no state but their weights) survive their actor dying:
Ray restarts the actor, the proxy replays the last weight update into it, then re-issues the failed
call with the same arguments and generator states — the re-issued prompts produce the same
trajectories, so nothing is lost or duplicated.
"""

from __future__ import annotations

import logging
import time

import ray
from ray.exceptions import ActorUnavailableError, RayActorError

from rlxf.runtime import ray_errors
from rlxf.runtime.wire import CallResult, RemoteValue, ReplayLog, WireProxy, deferred_wire

logger = logging.getLogger(__name__)


class RoleProxy(WireProxy):
    def __init__(
        self, name: str, actor, restartable: bool, max_retries: int = 3, keep_alive=None, remote_method: str = "call"
    ) -> None:
        self._name = name
        self._remote_method = remote_method  # the RoleWorker method that runs a call
        self._keep_alive = keep_alive  # the actor's constructor arguments, needed again on restart
        self._actor = actor
        self._restartable = restartable
        self._max_retries = max_retries
        self._replay = ReplayLog()
        self.restarts = 0

    def _transport(self, method: str, wire_args: tuple, wire_kwargs: dict) -> CallResult:
        for attempt in range(self._max_retries + 1):
            try:
                result = ray_errors.get(getattr(self._actor, self._remote_method).remote(method, wire_args, wire_kwargs))
                break
            except (RayActorError, ActorUnavailableError) as err:
                if not self._restartable or attempt == self._max_retries:
                    raise
                self.restarts += 1
                logger.warning("role %s died during %s (%s); re-issuing after restart", self._name, method, err)
                self._replay_state()
        self._replay.record(method, wire_args, wire_kwargs)
        return result

    def wait_restarted(self) -> bool:
        """After the actor died outside a call of this proxy: wait for Ray's restart and replay the
        state; False for a role that is not restarted."""
        if not self._restartable:
            return False
        self.restarts += 1
        self._replay_state()
        return True

    def _replay_state(self, wait_seconds: float = 120.0) -> None:
        """Wait for the restarted actor (calls fail as 'unavailable' while it restarts), then replay."""
        deadline = time.monotonic() + wait_seconds
        while True:
            try:
                ray_errors.get(self._actor.pid.remote())
                break
            except (RayActorError, ActorUnavailableError):
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.2)
        self._replay.replay(lambda method, args, kwargs: ray_errors.get(self._actor.call.remote(method, args, kwargs)))

    def defer(self, method: str, *args, **kwargs) -> RemoteValue:
        """Run ``method`` and leave its value in the object store: pass the result to another proxy's
        call and that actor fetches it directly. For calls without in-place effects."""
        wire_args, wire_kwargs = deferred_wire(f"{self._name}.{method}", args, kwargs)
        return RemoteValue(ray_errors.get(self._actor.call_stored.remote(method, wire_args, wire_kwargs))[0])

    def attach(self, factory, *args, **kwargs) -> RoleProxy:
        """Build ``factory(role, *args)`` inside the role's actor; calls on the returned proxy go to it.
        Not restarted with the actor: it may hold state (the async producer's queue)."""
        ray_errors.get(self._actor.attach.remote(factory, args, kwargs))
        return RoleProxy(f"{self._name}+{getattr(factory, '__name__', 'attached')}", self._actor, restartable=False,
                         remote_method="call_attached")

    def attribute(self, name: str):
        """A plain attribute (or property) of the remote role."""
        return ray_errors.get(self._actor.attribute.remote(name))

    def pid(self) -> int:
        return ray_errors.get(self._actor.pid.remote())

    def node_id(self) -> str:
        return ray_errors.get(self._actor.node_id.remote())

    def kill(self) -> None:
        ray.kill(self._actor, no_restart=True)
