"""rlxf keeps freed memory mapped (rlxf/freed_memory.py): once warm, a loop that allocates and frees the same
large tensor (a micro-batch's logits, the embedding's dense gradient) reuses pages instead of faulting fresh
ones in, and its resident set stops growing; RLXF_KEEP_FREED_MEMORY=0 leaves glibc's malloc as it was."""

import json
import os
import subprocess
import sys

import pytest

CYCLES, WARM = 40, 20
PROBE = f"""
import json, resource
import rlxf, torch
def faults():
    return resource.getrusage(resource.RUSAGE_SELF).ru_minflt
def resident_mib():
    return int(open("/proc/self/statm").read().split()[1]) * resource.getpagesize() / 2**20
faults_per_cycle, resident = [], []
for _ in range({CYCLES}):
    before = faults()
    block = torch.ones(64 * 1024 * 1024 // 4)  # 64 MiB, touched
    del block
    faults_per_cycle.append(faults() - before)
    resident.append(resident_mib())
print(json.dumps({{"kept": rlxf.KEEPS_FREED_MEMORY, "faults": faults_per_cycle, "resident": resident}}))
"""

PAGES = 64 * 1024 * 1024 // 4096  # what touching 64 MiB of fresh memory faults in


def probe(switch: str) -> dict:
    env = {**os.environ, "RLXF_KEEP_FREED_MEMORY": switch}
    out = subprocess.run([sys.executable, "-c", PROBE], env=env, capture_output=True, text=True, check=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="glibc's mallopt")
def test_a_warm_loop_reuses_freed_pages_and_its_resident_set_stops_growing():
    kept = probe("1")
    assert kept["kept"] is True
    # The first cycles can fault: torch asks posix_memalign for 64-byte alignment, which glibc serves from a
    # slightly larger request, so a hole of exactly the freed size is not reused until the small leftovers
    # that keep holes apart stop landing in glibc's per-thread cache (7 per size). After that, none.
    assert sum(kept["faults"][WARM:]) < PAGES // 10
    assert kept["resident"][-1] - kept["resident"][WARM] < 8  # MiB: flat once warm
    assert kept["resident"][-1] - kept["resident"][0] < 16 * 64  # bounded: a few blocks' worth, not one a cycle
    plain = probe("0")
    assert plain["kept"] is False
    assert sum(plain["faults"][WARM:]) > (CYCLES - WARM) * PAGES // 2  # munmap'd and faulted in every cycle
