import time
from uuid import uuid4

from openenv.core.env_server.http_server import create_app
from openenv.core.env_server.interfaces import Environment
from openenv.core.env_server.types import State

from rlxf_oe_guess.models import GuessAction, GuessObservation

STEPS = 2


def score(message: str, digit: int) -> float:
    """The environment's scoring of one message (the tests call it on the decoded tokens too)."""
    return 1.0 if message.strip().startswith(str(digit)) else 0.0


class GuessEnvironment(Environment):
    SUPPORTS_CONCURRENT_SESSIONS = True

    def __init__(self):
        self._state = State(episode_id=str(uuid4()), step_count=0)
        self.digit = 0

    def reset(self, seed=None, episode_id=None, **kwargs) -> GuessObservation:
        self._state = State(episode_id=episode_id or str(uuid4()), step_count=0)
        self.digit = int(seed or 0) % 10
        return GuessObservation(text=f"Reply with the digit {self.digit} and nothing else.", done=False, reward=0.0)

    def step(self, action: GuessAction, timeout_s=None, **kwargs) -> GuessObservation:
        self._state.step_count += 1
        if action.message.startswith("(hang)"):  # a server that stops answering (the tests' hang)
            time.sleep(5)
        reward = score(action.message, self.digit)
        done = self._state.step_count >= STEPS
        return GuessObservation(text=f"Again: reply with the digit {self.digit} only.", done=done, reward=reward,
                                metadata={"chars": len(action.message)})

    @property
    def state(self) -> State:
        return self._state


app = create_app(GuessEnvironment, GuessAction, GuessObservation, env_name="rlxf_oe_guess", max_concurrent_envs=64)
