"""Runtimes: where the roles of a run live. ``runtime.kind`` picks one by name.

A runtime has one job: ``place(role_name, factory, *args)`` returns something the loop can call role
methods on — the object itself (``embedded``) or a proxy to a Ray actor (``ray``) — and ``close()``.
The controller loop is the same either way. Importing this package never imports Ray.
"""

from __future__ import annotations

from typing import Any, Protocol

from rlxf.registry import Registry

# name -> module that registers it, imported on first use (so `ray` is only imported for kind: ray).
RUNTIME_MODULES = {
    "embedded": "rlxf.runtime.embedded",
    "ray": "rlxf.runtime.ray_runtime",
    "process": "rlxf.runtime.process_runtime",
}
RUNTIMES: Registry = Registry("runtime", modules=RUNTIME_MODULES)


class Runtime(Protocol):
    """Where a run's roles live (``runtime.kind``); the loops see only this."""

    def place(self, role: str, factory, *args, **kwargs) -> Any:
        """``factory(*args, **kwargs)`` as role ``role``: the object itself, or a proxy with its methods."""
        ...

    def attach(self, role, factory, *args, **kwargs) -> Any:
        """``factory(role, *args, **kwargs)`` built where ``role`` lives (the async producer)."""
        ...

    def revive(self, role, error: BaseException) -> bool:
        """Whether ``role`` came back after ``error`` (a restarted process or actor)."""
        ...

    def portable(self, role, config) -> Any:
        """What stands for ``role`` where another role lives."""
        ...

    def close(self) -> None: ...


def build_runtime(config) -> Runtime:
    """The runtime for ``config.runtime`` (a ``RuntimeConfig``); takes the whole run config."""
    return RUNTIMES.get(config.runtime.kind)(config)
