"""The embedded runtime (the default): every role is a plain object in this process."""

from __future__ import annotations

from rlxf.runtime import RUNTIMES


@RUNTIMES.register("embedded")
class EmbeddedRuntime:
    def __init__(self, config=None) -> None:
        self.config = config

    def place(self, role: str, factory, *args, **kwargs):
        return factory(*args, **kwargs)

    def attach(self, role, factory, *args, **kwargs):
        """``factory(role, *args)``: something that lives beside ``role`` (e.g. the async producer)."""
        return factory(role, *args, **kwargs)

    def revive(self, role, error: BaseException) -> bool:
        """Whether ``role`` came back after ``error`` (in this process nothing restarts)."""
        return False

    def portable(self, role, config):
        """What stands for ``role`` in another place of this run (here: the role itself)."""
        return role

    def close(self) -> None:
        pass
