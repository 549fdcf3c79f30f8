"""rlxf's thread defaults: half the cores for torch, passive OpenMP waiting (benchmarks/threads_under_load.py)."""

import os
import subprocess
import sys

from rlxf.loops.setup import default_threads


def test_default_threads_is_half_the_cores_at_least_one():
    assert [default_threads(cpus) for cpus in (1, 2, 3, 4, 16)] == [1, 1, 1, 2, 8]


def _wait_policy_after_import(env_value: str | None) -> str:
    env = {k: v for k, v in os.environ.items() if k != "OMP_WAIT_POLICY"}
    if env_value is not None:
        env["OMP_WAIT_POLICY"] = env_value
    code = "import rlxf, os; print(os.environ['OMP_WAIT_POLICY'])"
    return subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True).stdout.strip()


def test_import_rlxf_sets_a_passive_wait_policy_unless_one_is_set():
    assert _wait_policy_after_import(None) == "PASSIVE"
    assert _wait_policy_after_import("ACTIVE") == "ACTIVE"
