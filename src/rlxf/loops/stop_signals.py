"""SIGTERM / SIGINT during a run: finish the step in progress, checkpoint it, and end cleanly.

A scheduler's SIGTERM (preemption) or a Ctrl-C should cost nothing already done. The first signal only
sets ``requested``: the loop completes the step it is in (a half-trained step is not consistent),
checkpoints it, logs it, closes its roles and returns; ``rlxf train`` then exits with 128 + the
signal's number and ``rlxf train --resume RUN_DIR`` continues. A second signal stops at once
(KeyboardInterrupt), leaving the previous checkpoint.
"""

from __future__ import annotations

import signal
import threading

HANDLED = (signal.SIGTERM, signal.SIGINT)


class StopSignals:
    def __init__(self) -> None:
        self.requested: signal.Signals | None = None
        self._previous: dict[int, object] = {}

    def install(self) -> StopSignals:
        """Handle the signals (only the main thread may; elsewhere this does nothing)."""
        if threading.current_thread() is threading.main_thread():
            self._previous = {sig: signal.signal(sig, self._on_signal) for sig in HANDLED}
        return self

    def restore(self) -> None:
        for sig, handler in self._previous.items():
            signal.signal(sig, handler)
        self._previous = {}

    def _on_signal(self, signum: int, frame) -> None:
        if self.requested is not None:  # asked twice: stop now
            self.restore()
            raise KeyboardInterrupt
        self.requested = signal.Signals(signum)

    @property
    def exit_code(self) -> int:
        """The shell's convention for a process ended by a signal: 128 + its number (0 when none came)."""
        return 128 + self.requested.value if self.requested else 0
