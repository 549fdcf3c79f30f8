"""Multi-turn rollouts with a long-tailed tool latency: lockstep turns (a barrier) vs each trajectory
advancing on its own vs an ideal tool that answers at once.

    OMP_NUM_THREADS=1 nice -n 10 .venv/bin/python benchmarks/tool_latency_barrier.py [--rows 32] [--turns 6] \\
        [--median-ms 10] [--sigma 2.0] [--cap 100] [--reps 3]

Every policy turn is answered by a tool call that sleeps (``asyncio.sleep``) for a lognormal time:
``median * exp(sigma * z)``, ``z ~ N(0, 1)``, capped at ``cap x median``; with sigma 2 about one call in
40 takes over 50x the median. The latencies are drawn once per (trajectory, turn), so every system
waits for the same calls. Systems, alternating, each a full ``EnvRolloutRole.generate`` on the torch
engine with the default tiny Llama (random weights, 3.2M parameters), ``--new`` tokens per turn (no
end-of-sequence) and an observation of ``--obs`` tokens:

* ``barrier``: ``env.turn_barrier: true``: nobody decodes until every call of the turn has answered;
* ``no_barrier``: the default: a trajectory decodes again as soon as its own call answers;
* ``ideal``: the same rollout with a tool of zero latency.

``critical_path_s`` is the longest sum of one trajectory's latencies (no rollout can be faster than it);
``barrier_wait_s`` the sum over turns of the slowest call of the turn (what lockstep turns wait).
"""

from __future__ import annotations

import argparse
import asyncio
import math
import random
import sys
import tempfile
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).parent))
from common import alternate, emit, median  # noqa: E402
from kv_cache_turns import build_model  # noqa: E402
from rlxf.config import EnvConfig  # noqa: E402
from rlxf.envs.base import ENVS  # noqa: E402
from rlxf.models.loading import load_tokenizer  # noqa: E402
from rlxf.models.tiny import build_tiny_model  # noqa: E402
from rlxf.roles.env_rollout import EnvRolloutRole  # noqa: E402
from rlxf.rollout.sampling import SamplingParams  # noqa: E402
from rlxf.rollout.torch_engine import TorchRolloutEngine  # noqa: E402


@ENVS.register("bench_slow_tool")
class SlowToolEnv:
    """Each step sleeps ``latencies[row id][turn]`` seconds, then answers ``obs`` token ids."""

    def __init__(self, latencies: list[list[float]], obs: int = 8):
        self.latencies, self.obs = latencies, obs

    def reset(self, task):
        self.id, self.turn = task["id"], 0
        return None

    async def step(self, action):
        await asyncio.sleep(self.latencies[self.id][self.turn])
        self.turn += 1
        return [3 + (i % 90) for i in range(self.obs)], 0.0, False, {}


def draw_latencies(rows: int, turns: int, median_s: float, sigma: float, cap: float, seed: int = 0) -> list[list[float]]:
    rng = random.Random(seed)
    return [[min(cap, math.exp(sigma * rng.gauss(0.0, 1.0))) * median_s for _ in range(turns)] for _ in range(rows)]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rows", type=int, default=32)
    parser.add_argument("--turns", type=int, default=6)
    parser.add_argument("--new", type=int, default=8)
    parser.add_argument("--obs", type=int, default=8)
    parser.add_argument("--median-ms", type=float, default=10.0)
    parser.add_argument("--sigma", type=float, default=2.0)
    parser.add_argument("--cap", type=float, default=100.0)
    parser.add_argument("--reps", type=int, default=3)
    parser.add_argument("--threads", type=int, default=1)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    with tempfile.TemporaryDirectory() as tmp:
        tokenizer = load_tokenizer(str(build_tiny_model(Path(tmp) / "tiny")))
    model = build_model("tiny", len(tokenizer))
    latencies = draw_latencies(args.rows, args.turns, args.median_ms / 1000, args.sigma, args.cap)
    zero = [[0.0] * args.turns for _ in range(args.rows)]
    rows = [{"prompt": f"{i}+{2 * i}=", "id": i} for i in range(args.rows)]
    params = SamplingParams(n=1, temperature=1.0, max_new_tokens=args.new)

    def system(barrier: bool, table: list[list[float]]):
        engine = TorchRolloutEngine(model, [len(tokenizer) + 7], tokenizer.pad_token_id)  # no token ends a turn
        cfg = EnvConfig(name="bench_slow_tool", kwargs={"latencies": table, "obs": args.obs},
                        max_turns=args.turns, max_total_tokens=args.turns * (args.new + args.obs),
                        keep_kv_cache=True, turn_barrier=barrier, max_concurrent_steps=args.rows)
        role = EnvRolloutRole(engine, tokenizer, False, 64, cfg)
        return lambda: role.generate(rows, params, torch.Generator().manual_seed(0))

    systems = {"barrier": system(True, latencies), "no_barrier": system(False, latencies), "ideal": system(False, zero)}
    seconds = alternate(systems, args.reps)
    step = {name: round(median(s), 4) for name, s in seconds.items()}
    flat = sorted(x for row in latencies for x in row)
    emit({
        "benchmark": "tool_latency_barrier", "rows": args.rows, "turns": args.turns, "new_tokens_per_turn": args.new,
        "latency": {"median_ms": args.median_ms, "sigma": args.sigma, "cap_x_median": args.cap,
                    "calls_over_50x_median": sum(x > 50 * args.median_ms / 1000 for x in flat),
                    "calls": len(flat), "max_s": round(flat[-1], 3), "mean_s": round(sum(flat) / len(flat), 4)},
        "critical_path_s": round(max(sum(row) for row in latencies), 3),
        "barrier_wait_s": round(sum(max(row[t] for row in latencies) for t in range(args.turns)), 3),
        "step_s": step, "all_s": {name: [round(x, 4) for x in s] for name, s in seconds.items()},
        "barrier_over_no_barrier": round(step["barrier"] / step["no_barrier"], 2),
        "no_barrier_over_ideal": round(step["no_barrier"] / step["ideal"], 2),
        "barrier_over_ideal": round(step["barrier"] / step["ideal"], 2),
    })


if __name__ == "__main__":
    main()
