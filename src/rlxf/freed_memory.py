"""Keep freed memory in the process instead of handing it back to the kernel (glibc's malloc).

A training pass allocates and frees the same large buffers every micro-batch: the LM head's logits
and their gradient, the dense gradient of the embedding matrix (49,152 x 576 fp32 = 113 MB on
SmolLM2-135M), activations. glibc serves every block above its mmap threshold (at most 32 MB) with a
fresh ``mmap`` and returns it with ``munmap`` when freed, so the next micro-batch page-faults the
same memory in again: zeroing a fresh 113 MB tensor took 62-77 ms here against 7 ms on reused pages,
and the SmolLM2 training pass at the recipe's shape spent ~17% of its CPU time on such faults (bf16:
9.1 -> 7.6 s of CPU per update of 32 rows; fp32 14.0 -> 12.4 s; docs/benchmarks.md).

So, where the C library is glibc, big blocks come from the heap (``M_MMAP_MAX`` 0) and the heap is
not trimmed (``M_TRIM_THRESHOLD`` at its maximum): freed pages stay mapped and are reused. The
resident set then stays at its high-water mark instead of falling between passes (the peak itself
is unchanged up to fragmentation). ``RLXF_KEEP_FREED_MEMORY=0`` leaves malloc as it was.

The cost is a warm-up: torch allocates with ``posix_memalign`` (64-byte alignment), which glibc 2.36
serves from a request slightly larger than the block, so a hole of exactly a freed block's size is not
reused while the small leftovers that separate holes sit in glibc's per-thread cache (7 per size). A loop
that allocates and frees one 64 MiB tensor grows by 3-7 such blocks over its first ~10 cycles, then
faults nothing and stays flat (tests/core/test_freed_memory.py); the SmolLM2 training pass peaks 12%
higher than with released memory (docs/benchmarks.md).
"""

from __future__ import annotations

import ctypes
import ctypes.util
import os

# mallopt parameters (malloc.h)
M_TRIM_THRESHOLD = -1
M_MMAP_MAX = -4
LARGEST_TRIM_THRESHOLD = 2**31 - 1  # an int: mallopt takes one

ENV_SWITCH = "RLXF_KEEP_FREED_MEMORY"


def keep_freed_memory() -> bool:
    """Apply the setting once per process; True if glibc took it."""
    if os.environ.get(ENV_SWITCH, "1") == "0":
        return False
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
        mallopt = libc.mallopt
    except (OSError, AttributeError):  # not glibc (musl, macOS, Windows): nothing to tune
        return False
    mallopt.argtypes, mallopt.restype = [ctypes.c_int, ctypes.c_int], ctypes.c_int
    return bool(mallopt(M_MMAP_MAX, 0)) and bool(mallopt(M_TRIM_THRESHOLD, LARGEST_TRIM_THRESHOLD))
