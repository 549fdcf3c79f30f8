"""A name -> object registry: config picks implementations by name, never by if/elif.

The one way to register: an implementation decorates itself with ``@REGISTRY.register("name")`` where
it is defined, and the registry names the module of each built-in (``modules``) so that asking for a
name imports just that module (no hand imports, no import of every implementation up front).
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Iterator
from typing import Generic, TypeVar

T = TypeVar("T")


class Registry(Generic[T]):
    """Maps names to implementations of one kind (``kind`` appears in error messages)."""

    def __init__(self, kind: str, modules: dict[str, str] | None = None) -> None:
        self.kind = kind
        self._entries: dict[str, T] = {}
        # name -> module that registers it, imported on first ``get`` (keeps optional dependencies
        # such as Ray or DeepSpeed out of ``import rlxf``)
        self.modules = dict(modules or {})

    def register(self, name: str) -> Callable[[T], T]:
        """Decorator: ``@REGISTRY.register("name")`` adds the decorated object under ``name``."""

        def add(obj: T) -> T:
            if name in self._entries:
                raise ValueError(f"{self.kind} {name!r} is registered twice")
            self._entries[name] = obj
            return obj

        return add

    def get(self, name: str) -> T:
        if name not in self._entries and name in self.modules:
            importlib.import_module(self.modules[name])
        try:
            return self._entries[name]
        except KeyError:
            known = ", ".join(self.names()) or "(none)"
            raise KeyError(f"unknown {self.kind} {name!r}; known: {known}") from None

    def names(self) -> list[str]:
        """Registered names and those a module will register on first use."""
        return sorted(set(self._entries) | set(self.modules))

    def __contains__(self, name: object) -> bool:
        return name in self._entries

    def __iter__(self) -> Iterator[str]:
        return iter(sorted(self._entries))
