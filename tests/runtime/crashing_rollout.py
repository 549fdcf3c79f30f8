"""A rollout role whose process dies inside a ``generate`` call once, for the restart test.

``RLXF_TEST_CRASH_MARKER`` names a file holding N (or ``load_weights:N``): each ``generate`` (or
``load_weights``) call counts it down, and the call that reaches 0 deletes the file and SIGKILLs its
own process (no cleanup, like a lost node)."""

from __future__ import annotations

import os
import signal

from rlxf.loops.setup import make_rollout_role


def count_down(method: str) -> None:
    """The marker holds ``N`` (counts ``generate`` calls) or ``method:N``; the call that brings N to
    0 deletes the marker and SIGKILLs this process."""
    marker = os.environ.get("RLXF_TEST_CRASH_MARKER")
    if not marker or not os.path.exists(marker):
        return
    counted, _, left = open(marker).read().rpartition(":")
    if (counted or "generate") != method:
        return
    left = int(left) - 1
    if left == 0:
        os.unlink(marker)
        os.kill(os.getpid(), signal.SIGKILL)
    with open(marker, "w") as f:
        f.write(f"{counted}:{left}" if counted else str(left))


class CrashOnce:
    def __init__(self, role) -> None:
        self.role = role

    def __getattr__(self, name):
        return getattr(self.role, name)

    def generate(self, *args, **kwargs):
        count_down("generate")
        return self.role.generate(*args, **kwargs)

    def load_weights(self, *args, **kwargs):
        count_down("load_weights")
        return self.role.load_weights(*args, **kwargs)


def crashing_rollout_role(config, policy, tokenizer):
    return CrashOnce(make_rollout_role(config, policy, tokenizer))


class CrashOnCall:
    """Any role whose process dies in the call the marker names (``method:N``: the Nth call of it)."""

    def __init__(self, role) -> None:
        self.role = role

    def __getattr__(self, name):
        attr = getattr(self.role, name)
        if not callable(attr):
            return attr

        def call(*args, **kwargs):
            count_down(name)
            return attr(*args, **kwargs)

        return call


def crashing_role(factory, *args, **kwargs):
    """``factory``'s role wrapped in :class:`CrashOnCall` (picklable: built again in a role's process)."""
    return CrashOnCall(factory(*args, **kwargs))
