"""Give the freed heap back to the operating system between RL stages (glibc's ``malloc_trim``).

glibc keeps memory that Python and torch free (KV caches, activations, packed weight buckets) in its
arenas for reuse; in an RL step each stage frees what the next one does not reuse in the same shapes,
so a process's RSS sits ~200 MB above its live heap on the default recipe and varies ~20 MB from run
to run (docs/benchmarks.md, LoRA vs full). ``malloc_trim(0)`` returns the free pages of every arena
at once, in milliseconds; it frees nothing live, so results are unchanged. Elsewhere (macOS, musl,
Windows) there is no such call and this is a no-op.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import platform
from functools import cache


@cache
def _glibc_malloc_trim():
    """glibc's ``malloc_trim``, or None where the C library is not glibc."""
    if platform.system() != "Linux" or platform.libc_ver()[0] != "glibc":
        return None
    try:
        trim = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6").malloc_trim
    except (OSError, AttributeError):
        return None
    trim.argtypes, trim.restype = [ctypes.c_size_t], ctypes.c_int
    return trim


def release_freed_memory() -> bool:
    """Return the heap's free pages to the OS; True when glibc released any, False otherwise (or no glibc)."""
    trim = _glibc_malloc_trim()
    return bool(trim(0)) if trim is not None else False
