"""The sandbox's isolation modes in tests: a security test whose mode is missing here fails, unless the
machine is declared weaker on purpose (RLXF_SANDBOX_WEAK_OK=1), so a skip never hides a lost guarantee."""

from __future__ import annotations

import os

import pytest

from rlxf.rewards.sandbox import resolve_isolation

WEAK_OK = os.environ.get("RLXF_SANDBOX_WEAK_OK") == "1"


def require_isolation(mode: str) -> str:
    """``mode`` if this machine provides it; else fail (or skip when RLXF_SANDBOX_WEAK_OK=1)."""
    if mode != "auto" and resolve_isolation(mode) != mode:
        message = (f"isolation {mode!r} is not available here (got {resolve_isolation(mode)!r}); "
                   "set RLXF_SANDBOX_WEAK_OK=1 to accept a machine without it")
        if WEAK_OK:
            pytest.skip(message)
        pytest.fail(message)
    return mode
