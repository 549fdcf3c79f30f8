"""The client of ``rlxf serve-reward``: a reward that scores on another machine.

``reward: {function: remote, kwargs: {url: "http://10.0.0.5:8088", timeout_seconds: 120, token_env: RLXF_REWARD_TOKEN}}``
(``token_env``: the environment variable holding the server's bearer token, when it has one). A slow,
refusing, failing or garbage-answering server is retried (``attempts``, ``backoff_seconds``: see
rewards/http_client.py), then the error names the server and every try; the reward role names the
reward and the run stops with its data saved. A reply with the wrong number of scores is an error too.
"""

from __future__ import annotations

import os
from collections.abc import Sequence

from rlxf.rewards.base import RewardOutput
from rlxf.rewards.http_client import EndpointError, RetryPolicy, post_json
from rlxf.rewards.registry import REWARDS


class RemoteRewardError(EndpointError):
    pass


def _reward_output(reply: dict) -> RewardOutput:
    return RewardOutput(scores=[float(s) for s in reply["scores"]], components=reply.get("components") or {})


@REWARDS.register("remote")
class RemoteReward:
    def __init__(self, url: str, timeout_seconds: float = 300.0, token_env: str | None = None, attempts: int = 3,
                 backoff_seconds: float = 0.5) -> None:
        self.url = url.rstrip("/")
        self.policy = RetryPolicy(attempts=attempts, backoff_seconds=backoff_seconds, timeout_seconds=timeout_seconds)
        self.headers: dict[str, str] = {}
        if token_env:  # the server's bearer token, read from the environment (never from a recipe)
            if not os.environ.get(token_env):
                raise ValueError(f"remote reward: the environment variable {token_env} (token_env) is unset or empty")
            self.headers["Authorization"] = f"Bearer {os.environ[token_env]}"

    def score(self, prompts: Sequence[str], responses: Sequence[str], metadata: Sequence[dict]) -> RewardOutput:
        body = {"prompts": list(prompts), "responses": list(responses), "metadata": list(metadata)}
        return post_json(f"{self.url}/score", body, _reward_output, self.policy, self.headers, name="reward server",
                         error=RemoteRewardError)
