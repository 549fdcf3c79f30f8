"""SIGTERM / SIGINT during a run: finish the step in progress, checkpoint it, and end cleanly.

Every loop (sft, dpo, reward_model, online_dpo, rl, rl_async) installs :class:`StopSignals` when it
starts, so all of them stop the same way. A scheduler's SIGTERM (preemption) or a Ctrl-C should cost
nothing already done. The first signal only sets ``requested``: the loop completes the step it is in (a
half-trained step is not consistent), checkpoints it, logs it, closes its roles and returns with
``stopped_by`` in its summary; ``rlxf train`` then says so in one ``rlxf:`` line and exits with 128 + the
signal's number, and ``rlxf train --resume RUN_DIR`` continues from that step.

Before a run's first checkpoint (loading, the SFT warm-up stage of an RL or DPO run, the step-0
evaluation) there is no step to keep: the warm-up stops after its current step with
:class:`StoppedBeforeFirstCheckpoint`, and the run folder is put back as it was found (loops/run_dir.py).

A second signal stops at once (:class:`StoppedAtOnce`, a KeyboardInterrupt): the step in progress is
dropped, the previous checkpoint is kept; ``rlxf`` says so in one line, no traceback.
"""

from __future__ import annotations

import signal
import threading

from rlxf.errors import RlxfError

HANDLED = (signal.SIGTERM, signal.SIGINT)


class StoppedAtOnce(KeyboardInterrupt):
    """A second stop signal: the run ends now, without finishing or checkpointing the step in progress."""

    def __init__(self, signum: signal.Signals) -> None:
        super().__init__(signum.name)
        self.signal = signum
        self.exit_code = 128 + signum.value


class StoppedBeforeFirstCheckpoint(RlxfError):
    """A stop signal before the run had a checkpoint to keep (e.g. during its SFT warm-up stage)."""

    def __init__(self, message: str, signum: signal.Signals) -> None:
        super().__init__(message)
        self.exit_code = 128 + signum.value


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
            raise StoppedAtOnce(signal.Signals(signum))
        self.requested = signal.Signals(signum)

    def check_warm_up(self, stage: str, step: int, steps: int) -> None:
        """Between two steps of a stage that has no checkpoint of its own (the SFT warm-up): stop here."""
        if self.requested is not None:
            raise StoppedBeforeFirstCheckpoint(
                f"{self.requested.name} received during the {stage} (step {step} of {steps}), before the run's "
                "first checkpoint: nothing to keep, the run folder is as it was found; start the run again",
                self.requested)

    @property
    def exit_code(self) -> int:
        """The shell's convention for a process ended by a signal: 128 + its number (0 when none came)."""
        return 128 + self.requested.value if self.requested else 0
