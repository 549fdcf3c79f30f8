"""A chain of additions, one step per turn, where each correct step earns its own reward.

Rows come from the ``arithmetic_chain`` task (``data/arithmetic_chain.py``): ``chain`` is a list of
``{"expr", "answer"}``. The first prompt is the row's prompt (the first step, ``47+8=``). Each turn the
policy answers the current step; a correct answer earns ``step_reward`` and the environment shows the
next step with the true running value (``\\n55+6=``: the observation is the whole state); a wrong answer
earns 0 and ends the episode (``end_at_mistake=False``: it earns 0 and the episode goes on, the next step shown
from the true value, so every step is attempted and a row's score counts all its right steps). The episode
ends after the last step.

Components on the last step: ``correct`` (the whole chain solved; held-out ``eval/accuracy``) and
``steps_correct`` (the fraction of the chain's steps answered correctly).
"""

from __future__ import annotations

from rlxf.envs.base import ENVS, StepResult
from rlxf.rewards.arithmetic import is_correct


@ENVS.register("arithmetic_chain")
class ArithmeticChainEnv:
    def __init__(self, step_reward: float = 1.0, separator: str = "\n", end_at_mistake: bool = True) -> None:
        self.step_reward = step_reward
        self.separator = separator
        self.end_at_mistake = end_at_mistake
        self.chain: list[dict] = []
        self.position = 0
        self.right = 0

    def reset(self, task: dict) -> None:
        if not task.get("chain"):
            raise ValueError("arithmetic_chain environment: the row has no `chain` (use data.task: arithmetic_chain)")
        self.chain, self.position, self.right = task["chain"], 0, 0
        return None

    def step(self, action: str) -> StepResult:
        right = is_correct(action, self.chain[self.position]["answer"])
        self.position += 1
        self.right += right
        last = self.position == len(self.chain)
        if not last and (right or not self.end_at_mistake):
            return self.separator + self.chain[self.position]["expr"], self.step_reward * right, False, {}
        components = {"correct": float(self.right == len(self.chain)), "steps_correct": self.right / len(self.chain)}
        return None, self.step_reward * right, True, {"components": components}
