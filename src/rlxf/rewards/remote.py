"""The client of ``rlxf serve-reward``: a reward that scores on another machine.

``reward: {function: remote, kwargs: {url: "http://10.0.0.5:8088", timeout_seconds: 120, token_env: RLXF_REWARD_TOKEN}}``
(``token_env``: the environment variable holding the server's bearer token, when it has one). A server
error is raised (the reward role names it and the run stops with its data saved), as is a reply with
the wrong number of scores.
"""

from __future__ import annotations

import json
import os
import urllib.error
import urllib.request
from collections.abc import Sequence

from rlxf.rewards.base import RewardOutput
from rlxf.rewards.registry import REWARDS


class RemoteRewardError(RuntimeError):
    pass


@REWARDS.register("remote")
class RemoteReward:
    def __init__(self, url: str, timeout_seconds: float = 300.0, token_env: str | None = None) -> None:
        self.url = url.rstrip("/")
        self.timeout = timeout_seconds
        self.headers = {"Content-Type": "application/json"}
        if token_env:  # the server's bearer token, read from the environment (never from a recipe)
            if not os.environ.get(token_env):
                raise ValueError(f"remote reward: the environment variable {token_env} (token_env) is unset or empty")
            self.headers["Authorization"] = f"Bearer {os.environ[token_env]}"

    def score(self, prompts: Sequence[str], responses: Sequence[str], metadata: Sequence[dict]) -> RewardOutput:
        body = json.dumps({"prompts": list(prompts), "responses": list(responses), "metadata": list(metadata)},
                          default=str).encode()
        request = urllib.request.Request(f"{self.url}/score", body, self.headers, method="POST")
        try:
            with urllib.request.urlopen(request, timeout=self.timeout) as reply:
                out = json.loads(reply.read())
        except urllib.error.HTTPError as err:
            detail = err.read().decode(errors="replace")[:500]
            raise RemoteRewardError(f"reward server {self.url} answered {err.code}: {detail}") from None
        except urllib.error.URLError as err:
            raise RemoteRewardError(f"reward server {self.url} unreachable: {err.reason}") from None
        return RewardOutput(scores=[float(s) for s in out["scores"]], components=out.get("components") or {})
