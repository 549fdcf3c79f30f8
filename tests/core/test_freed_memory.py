"""rlxf keeps freed memory mapped (rlxf/freed_memory.py): a second large tensor reuses the first's pages
instead of faulting fresh ones in; RLXF_KEEP_FREED_MEMORY=0 leaves glibc's malloc as it was."""

import json
import os
import subprocess
import sys

import pytest

PROBE = """
import json, resource
import rlxf, torch
def faults():
    return resource.getrusage(resource.RUSAGE_SELF).ru_minflt
first = torch.ones(64 * 1024 * 1024 // 4)  # 64 MiB, touched
del first
before = faults()
second = torch.ones(64 * 1024 * 1024 // 4)
print(json.dumps({"kept": rlxf.KEEPS_FREED_MEMORY, "faults": faults() - before}))
"""

PAGES = 64 * 1024 * 1024 // 4096  # what touching 64 MiB of fresh memory faults in


def probe(switch: str) -> dict:
    env = {**os.environ, "RLXF_KEEP_FREED_MEMORY": switch}
    out = subprocess.run([sys.executable, "-c", PROBE], env=env, capture_output=True, text=True, check=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="glibc's mallopt")
def test_a_freed_large_tensor_is_reused_without_page_faults():
    kept = probe("1")
    assert kept["kept"] is True
    assert kept["faults"] < PAGES // 10  # its pages were still mapped
    plain = probe("0")
    assert plain["kept"] is False
    assert plain["faults"] > PAGES // 2  # munmap'd and faulted in again
