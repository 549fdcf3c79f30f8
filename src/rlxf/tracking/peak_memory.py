"""Peak resident memory of this process, for the step metrics and summary.json: what a run needs of
the machine's RAM. Roles placed in other processes (Ray actors, process roles) are not counted."""

from __future__ import annotations

import resource
import sys


def peak_rss_mb() -> float:
    """The high-water mark of this process's resident set, in MiB (``ru_maxrss``: KiB on Linux, bytes on macOS)."""
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return round(peak / (1024 * 1024 if sys.platform == "darwin" else 1024), 1)
