"""peak_rss_mb is the process's high-water mark in MiB: a fresh process that touches 300 MiB shows it."""

import subprocess
import sys

SCRIPT = """
from rlxf.tracking.peak_memory import peak_rss_mb
before = peak_rss_mb()
block = b"\x01" * (300 * 1024 * 1024)  # written, so every page is resident (calloc zeros lazily)
print(before, peak_rss_mb())
"""


def test_a_300_mib_block_raises_the_peak_by_300_mib():
    out = subprocess.run([sys.executable, "-c", SCRIPT], capture_output=True, text=True, check=True).stdout
    before, after = map(float, out.split())
    # the block alone is 300 MiB; ``before`` may be the parent's size (a forked child starts with its mark)
    assert before > 0 and 300 <= after <= max(before, 60) + 310
