"""The process side of a role on Ray: one actor that builds the role and runs its method calls."""

from __future__ import annotations

import os

import torch

from rlxf.runtime.wire import CallResult, run_call


class RoleWorker:
    """Made a Ray actor by ``RayRuntime``; ``spec = (factory, args, kwargs)`` builds the role in the actor."""

    def __init__(self, spec: tuple, threads: int) -> None:
        if threads:
            torch.set_num_threads(threads)
        factory, args, kwargs = spec
        self.role = factory(*args, **kwargs)

    def call(self, method: str, args: tuple, kwargs: dict) -> CallResult:
        return run_call(getattr(self.role, method), args, kwargs)

    def call_stored(self, method: str, args: tuple, kwargs: dict) -> list:
        """The call's value put in the object store by this actor; returns ``[its reference]`` (small,
        so a caller can wait for the call and see its errors without fetching the value)."""
        import ray

        return [ray.put(run_call(getattr(self.role, method), args, kwargs).value)]

    def attach(self, factory, args: tuple, kwargs: dict) -> None:
        """Build ``factory(role, *args)`` in this process, beside the role (``RayRuntime.attach``)."""
        self.attached = factory(self.role, *args, **kwargs)

    def call_attached(self, method: str, args: tuple, kwargs: dict) -> CallResult:
        return run_call(getattr(self.attached, method), args, kwargs)

    def attribute(self, name: str):
        return getattr(self.role, name)

    def pid(self) -> int:
        return os.getpid()

    def node_id(self) -> str:
        """The Ray node this actor runs on (hex id), e.g. to check where a placement put a role."""
        import ray

        return ray.get_runtime_context().get_node_id()
