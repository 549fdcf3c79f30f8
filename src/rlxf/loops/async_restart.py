"""The asynchronous loop's handle on its producer, which outlives a rollout actor's death.

The producer lives inside the rollout actor (Ray) or child process (process runtime), so it dies with
it. When a call fails because the role died and the runtime restarted it (``runtime.revive``: a
restarted actor or a fresh child, its last weight update replayed), a new producer is attached beside
the new role, starting from the last
*trained* step (its data position and sampling state), and the trainer's current weights are posted
to it. Batches that were decoding or queued are generated again from the same prompts, so no prompt
is lost or trained twice; their samples are new draws. The embedded runtime does not restart roles:
the error goes up.
"""

from __future__ import annotations

from collections.abc import Callable


class RestartingProducer:
    def __init__(
        self, runtime, rollout, start: Callable[[], object], post_latest: Callable[[object], None], max_restarts: int,
    ) -> None:
        self.runtime, self.rollout, self._start, self._post_latest = runtime, rollout, start, post_latest
        self.max_restarts = max_restarts
        self.restarts = 0
        self.producer = start()

    def get(self):
        return self._call(lambda producer: producer.get())

    def post_weights(self, packed) -> None:
        self._call(lambda producer: producer.post_weights(packed))

    def call_rollout(self, method: str, args: tuple = (), kwargs: dict | None = None):
        return self._call(lambda producer: producer.call_rollout(method, args, kwargs))

    def stop(self) -> None:
        try:
            self.producer.stop()
        except Exception:  # noqa: BLE001  (a dead producer has nothing left to stop)
            pass

    def _call(self, use):
        while True:
            try:
                return use(self.producer)
            except Exception as err:
                if self.restarts >= self.max_restarts or not self.runtime.revive(self.rollout, err):
                    raise
                self.restarts += 1
                self.producer = self._start()
                self._post_latest(self.producer)
