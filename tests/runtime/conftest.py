"""A local Ray cluster shared by this folder's tests (started once, always shut down)."""

from __future__ import annotations

import os

import pytest


@pytest.fixture(scope="session")
def ray_cluster(tmp_path_factory):
    """Ray on 2 CPUs; workers see ``RLXF_TEST_CRASH_MARKER`` (tests/runtime/crashing_rollout.py)."""
    ray = pytest.importorskip("ray", reason="ray is not installed (pip install -e '.[ray]')")
    os.environ.setdefault("RAY_AUTH_MODE", "disabled")
    os.environ["RLXF_TEST_CRASH_MARKER"] = str(tmp_path_factory.mktemp("chaos") / "crash_on_call")
    from rlxf.runtime.ray_runtime import connect

    connect(None, num_cpus=2)
    try:
        yield ray
    finally:
        ray.shutdown()
