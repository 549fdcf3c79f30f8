"""A name -> object registry: config picks implementations by name, never by if/elif.

The one way to register: an implementation decorates itself with ``@REGISTRY.register("name")`` where
it is defined, and the registry names the module of each built-in (``modules``) so that asking for a
name imports just that module (no hand imports, no import of every implementation up front).
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Iterator
from typing import Any, Generic, TypeVar

from rlxf.errors import RlxfError

T = TypeVar("T")


class UnknownNameError(RlxfError, KeyError):
    """A name no implementation of the kind is registered under. A ``KeyError`` still (callers that catch it
    to name their own key keep doing so), and an :class:`RlxfError`, so a name that reaches a registry only
    once the run builds it (a tool in ``env.kwargs.tools``, a judge backend) is one ``rlxf:`` line too."""

    exit_code = 2  # a usage mistake, like a wrong key at start-up

    def __str__(self) -> str:  # KeyError's own str() quotes the message
        return str(self.args[0]) if self.args else ""


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
            raise UnknownNameError(f"unknown {self.kind} {name!r}; known: {known}") from None

    def names(self) -> list[str]:
        """Registered names and those a module will register on first use."""
        return sorted(set(self._entries) | set(self.modules))

    def __contains__(self, name: object) -> bool:
        return name in self._entries

    def __iter__(self) -> Iterator[str]:
        return iter(sorted(self._entries))


def keyword_problem(target: Callable, kwargs: dict[str, Any], key: str, skip: tuple[str, ...] = ()) -> str | None:
    """What is wrong with calling ``target(**kwargs)`` (a keyword it does not take, a required one missing,
    a value that is not of its annotated type), naming ``key.NAME``; None when the call would bind.
    ``skip``: keywords the caller fills in itself (not checked for presence)."""
    import inspect
    import typing

    from pydantic import TypeAdapter, ValidationError

    try:
        signature = inspect.signature(target)
    except (TypeError, ValueError):  # a builtin without a signature: nothing to check
        return None
    params = signature.parameters
    if not any(p.kind == p.VAR_KEYWORD for p in params.values()):
        unknown = sorted(set(kwargs) - {n for n, p in params.items() if p.kind in (p.POSITIONAL_OR_KEYWORD,
                                                                                    p.KEYWORD_ONLY)})
        if unknown:
            takes = ", ".join(n for n in params if n not in skip and params[n].kind != params[n].VAR_POSITIONAL)
            owner = getattr(target, "__name__", "it")
            return f"{key}.{unknown[0]}: {owner} takes no keyword {unknown[0]!r} (it takes: {takes or 'none'})"
    missing = [n for n, p in params.items() if p.default is p.empty and n not in kwargs and n not in skip
               and p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY)]
    if missing:
        return f"{key} needs {', '.join(f'{key}.{n}' for n in missing)}"
    try:
        hints = typing.get_type_hints(target.__init__ if inspect.isclass(target) else target)
    except Exception:  # noqa: BLE001 - an annotation that does not resolve: the types go unchecked
        return None
    for name, value in kwargs.items():
        if name in hints and name in params:
            try:
                TypeAdapter(hints[name]).validate_python(value, strict=True)
            except ValidationError as err:
                expected = err.errors()[0]["msg"]
                return f"{key}.{name}={value!r}: {expected[:1].lower()}{expected[1:]}"
            except Exception:  # noqa: BLE001 - an annotation pydantic cannot check (a Protocol, ...): unchecked
                continue
    return None
