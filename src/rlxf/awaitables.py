"""Sync-or-async plumbing: user code (rewards, environments) may return a value or an awaitable."""

from __future__ import annotations

import asyncio
import inspect
from collections.abc import Awaitable, Iterable
from typing import Any


async def maybe_await(value: Any) -> Any:
    """``await value`` when it is awaitable, else ``value``."""
    if inspect.isawaitable(value):
        return await value
    return value


def resolve(value: Any) -> Any:
    """The value, running it to completion first when it is awaitable (from synchronous code)."""
    if not inspect.isawaitable(value):
        return value
    return run_coroutine(maybe_await(value))


def gather(values: Iterable[Any]) -> list[Any]:
    """Resolve many sync-or-async results concurrently (one event loop for all of them)."""
    values = list(values)
    if not any(inspect.isawaitable(v) for v in values):
        return values

    async def _all() -> list[Any]:
        return list(await asyncio.gather(*(maybe_await(v) for v in values)))

    return run_coroutine(_all())


def run_coroutine(coro: Awaitable[Any]) -> Any:
    """``asyncio.run`` that also works when this thread already runs an event loop (then: a helper thread)."""
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return asyncio.run(coro)
    import concurrent.futures

    with concurrent.futures.ThreadPoolExecutor(max_workers=1) as pool:
        return pool.submit(asyncio.run, coro).result()
