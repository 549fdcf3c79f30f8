"""The embedded runtime (the default): every role is a plain object in this process."""

from __future__ import annotations

from rlxf.runtime import RUNTIMES


@RUNTIMES.register("embedded")
class EmbeddedRuntime:
    def __init__(self, config=None) -> None:
        self.config = config

    def place(self, role: str, factory, *args, **kwargs):
        return factory(*args, **kwargs)

    def close(self) -> None:
        pass
