"""A judge's held-out verdict accuracy against the number of sampled judgments k (``judge.samples``).

    python benchmarks/judge_accuracy_vs_k.py --judge runs/grm/checkpoints/step_000060/policy \
        [--reference runs/grm/checkpoints/step_000000/policy] [--ks 1,3,5] [--temperature 1.0] [--eval-size 200] \
        [--protocol solve_first]

Each checkpoint judges the held-out claims of the ``arithmetic_judge`` task (pointwise, the grm recipe's
seed and split) through the ``judge`` reward on the built-in engine, as a run would use it: greedy, then
k sampled judgments combined by majority vote. A verdict is "right" at score >= 0.5; a response whose every
sample is unparseable counts as wrong. Prints JSON: per checkpoint, accuracy for greedy and each k, and
the mean spread (the judges' uncertainty), and ``accepts``: how often the judge accepts the true sum and
the sum off by +-1 and +-10 (robustness to the near misses a gamed policy writes). ``--reference`` (e.g. the SFT start) runs side by side.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))

import torch  # noqa: E402

from common import emit  # noqa: E402
from rlxf.data.arithmetic import addends  # noqa: E402
from rlxf.data.judge_task import JUDGE_RUBRICS, arithmetic_judge_task  # noqa: E402
from rlxf.rewards.judge import JudgeReward  # noqa: E402


def engine_judge(path: str, protocol: str, samples: int = 1, temperature: float = 0.0) -> JudgeReward:
    """The checkpoint as the `judge` reward, shown claims as it was trained to be; -1 marks an unparseable verdict."""
    return JudgeReward(backend="engine", rubric=JUDGE_RUBRICS[protocol], min_score=0, max_score=1, default_score=-1.0,
                       samples=samples, aggregate="vote",
                       backend_kwargs={"path": path, "chat_template": False, "max_new_tokens": 64,
                                       "temperature": temperature, "batch_size": 256})


def verdict_accuracy(path: str, rows: list[dict], samples: int, temperature: float, seed: int,
                     protocol: str = "solve_first") -> dict:
    torch.manual_seed(seed)
    judge = engine_judge(path, protocol, samples, temperature)
    out = judge.score([r["question"] for r in rows], [r["claim"] for r in rows], rows)
    right = [score >= 0 and int(score >= 0.5) == row["label"] for score, row in zip(out.scores, rows)]
    spread = out.components["judge_spread"]
    return {"accuracy": sum(right) / len(rows), "mean_spread": sum(spread) / len(spread),
            "malformed": sum(out.components["judge_malformed"]) / len(rows)}


NEAR_MISSES = {"true": 0, "+1": 1, "-1": -1, "+10": 10, "-10": -10}  # offsets from the true sum


def near_miss_acceptance(path: str, rows: list[dict], protocol: str = "solve_first") -> dict[str, float]:
    """Greedy: the share of the held-out questions whose claim the judge accepts when the claim is the true sum,
    or the sum off by one in the units or the tens (what a policy RL'd against the judge drifts to)."""
    judge = engine_judge(path, protocol)
    questions = [r["question"] for r in rows]
    truths = [sum(addends(q)) for q in questions]
    accepted = {}
    for name, offset in NEAR_MISSES.items():
        out = judge.score(questions, [str(t + offset) for t in truths], rows)
        accepted[name] = sum(score >= 0.5 for score in out.scores) / len(rows)
    return accepted


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--judge", required=True)
    parser.add_argument("--reference")
    parser.add_argument("--ks", default="1,3,5")
    parser.add_argument("--temperature", type=float, default=1.0)
    parser.add_argument("--eval-size", type=int, default=200)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--protocol", default="solve_first", choices=sorted(JUDGE_RUBRICS),
                        help="how the judge was trained to be shown a claim (the grm recipe's data.task_args.protocol)")
    args = parser.parse_args()
    rows = arithmetic_judge_task(args.seed, args.eval_size, form="pointwise", digits=3, b_digits=1).eval
    checkpoints = {"judge": args.judge, **({"reference": args.reference} if args.reference else {})}
    missing = [f"--{name} {path}" for name, path in checkpoints.items() if not Path(path, "config.json").exists()]
    if missing:
        parser.error(f"no checkpoint (config.json) at {', '.join(missing)}")
    result = {"eval_claims": len(rows), "temperature": args.temperature}
    for name, path in checkpoints.items():
        by_k = {"greedy": verdict_accuracy(path, rows, 1, 0.0, args.seed, args.protocol)}
        for k in (int(k) for k in args.ks.split(",")):
            by_k[f"k={k}"] = verdict_accuracy(path, rows, k, args.temperature, args.seed, args.protocol)
        result[name] = {**by_k, "accepts": near_miss_acceptance(path, rows, args.protocol)}
    emit(result)


if __name__ == "__main__":
    main()
