"""A weighted mix of several rewards, with optional per-reward normalisation and final clipping.

    reward:
      function: mix
      kwargs:
        rewards:
          - {function: math, weight: 1.0}
          - {function: format, kwargs: {max_tokens: 512, overlong_buffer: 64}, weight: 0.5, name: fmt}
        normalize: none        # none | zscore | minmax: applied to each reward over the batch before weighting
        clip: [-1.0, 2.0]      # optional bounds on the final score

score = clip(sum_k weight_k * normalize(score_k)). Each reward's raw score is a component under its
``name`` (default: its ``function``); its own components pass through unchanged, prefixed with
``name/`` only where two rewards use the same component name. Async rewards run concurrently.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from rlxf.aio import gather
from rlxf.registry import Registry
from rlxf.rewards.base import RewardOutput, as_output
from rlxf.rewards.registry import REWARDS, build_reward

NORMALIZERS: Registry[Callable[[list[float]], list[float]]] = Registry("reward normalisation")


@NORMALIZERS.register("none")
def no_normalization(values: list[float]) -> list[float]:
    return list(values)


@NORMALIZERS.register("zscore")
def zscore(values: list[float], eps: float = 1e-6) -> list[float]:
    mean = sum(values) / len(values)
    std = (sum((v - mean) ** 2 for v in values) / len(values)) ** 0.5
    return [(v - mean) / (std + eps) for v in values]


@NORMALIZERS.register("minmax")
def minmax(values: list[float]) -> list[float]:
    lo, hi = min(values), max(values)
    return [(v - lo) / (hi - lo) if hi > lo else 0.0 for v in values]


@REWARDS.register("mix")
class MixedReward:
    def __init__(self, rewards: list[dict], normalize: str = "none", clip: tuple[float, float] | None = None) -> None:
        if not rewards:
            raise ValueError("mix: `rewards` must list at least one {function, kwargs, weight}")
        self.names, self.weights, self.rewards = [], [], []
        for entry in rewards:
            unknown = set(entry) - {"function", "kwargs", "weight", "name"}
            if unknown or "function" not in entry:
                raise ValueError(f"mix: each entry needs `function` (and may have kwargs, weight, name): {entry}")
            self.names.append(entry.get("name") or entry["function"])
            self.weights.append(float(entry.get("weight", 1.0)))
            self.rewards.append(build_reward(entry["function"], entry.get("kwargs")))
        if len(set(self.names)) != len(self.names):
            raise ValueError(f"mix: reward names must be unique (set `name:`), got {self.names}")
        self.normalize = NORMALIZERS.get(normalize)
        self.clip = tuple(clip) if clip is not None else None
        self.batch_dependent = normalize != "none"  # a sample's score depends on the rest of the batch

    def score(self, prompts: Sequence[str], responses: Sequence[str], metadata: Sequence[dict]) -> RewardOutput:
        raw = gather(r.score(prompts, responses, metadata) for r in self.rewards)
        outputs = [as_output(out, len(responses), name) for out, name in zip(raw, self.names)]
        scores = [0.0] * len(responses)
        for weight, out in zip(self.weights, outputs):
            for i, value in enumerate(self.normalize(out.scores)):
                scores[i] += weight * value
        if self.clip is not None:
            lo, hi = self.clip
            scores = [min(hi, max(lo, s)) for s in scores]
        return RewardOutput(scores=scores, components=self._components(outputs))

    def _components(self, outputs: list[RewardOutput]) -> dict[str, list[float]]:
        components = {name: out.scores for name, out in zip(self.names, outputs)}
        seen: dict[str, int] = {}
        for out in outputs:
            for key in out.components:
                seen[key] = seen.get(key, 0) + 1
        for name, out in zip(self.names, outputs):
            for key, values in out.components.items():
                components[key if seen[key] == 1 and key not in self.names else f"{name}/{key}"] = values
        return components
