"""A rollout role whose process dies inside a ``generate`` call once, for the restart test.

``RLXF_TEST_CRASH_MARKER`` names a file holding N: each ``generate`` counts it down, and the call that
reaches 0 deletes the file and SIGKILLs its own process (no cleanup, like a lost node)."""

from __future__ import annotations

import os
import signal

from rlxf.loops.setup import make_rollout_role


class CrashOnce:
    def __init__(self, role) -> None:
        self.role = role

    def __getattr__(self, name):
        return getattr(self.role, name)

    def generate(self, *args, **kwargs):
        marker = os.environ.get("RLXF_TEST_CRASH_MARKER")
        if marker and os.path.exists(marker):
            left = int(open(marker).read()) - 1
            if left == 0:
                os.unlink(marker)
                os.kill(os.getpid(), signal.SIGKILL)
            with open(marker, "w") as f:
                f.write(str(left))
        return self.role.generate(*args, **kwargs)


def crashing_rollout_role(config, policy, tokenizer):
    return CrashOnce(make_rollout_role(config, policy, tokenizer))
