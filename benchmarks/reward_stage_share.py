"""The reward stage's share of an RL step: a few steps of a recipe, ``time/reward`` / ``time/step``.

    python benchmarks/reward_stage_share.py [RECIPE] [--steps 6] [key=value ...]

Runs the recipe (default: reasoning_gym.yaml) with a short SFT warm-up and held-out evaluation at every
step, and prints JSON: per-stage mean seconds over the steps after the first (warm-up) and the reward's
share of a step (``time/reward`` over ``time/step``; the held-out evaluation's own reward calls are
inside ``time/eval``, reported too).
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))

from common import emit  # noqa: E402
from rlxf.checked_config import load_config  # noqa: E402
from rlxf.loops import get_loop  # noqa: E402

RECIPES = Path(__file__).resolve().parents[1] / "src" / "rlxf" / "recipes"


def stage_means(metrics_file: Path) -> dict[str, float]:
    rows = [json.loads(line) for line in metrics_file.read_text().splitlines() if line.strip()]
    steps = [r for r in rows if "time/step" in r][1:]  # the first step pays one-off set-up
    keys = sorted({k for r in steps for k in r if k.startswith("time/")})
    return {k: sum(r.get(k, 0.0) for r in steps) / len(steps) for k in keys}


def run_recipe_steps(recipe: str, steps: int, overrides: list[str]) -> dict[str, float]:
    """Run ``steps`` steps of ``recipe`` (short SFT warm-up, no checkpoints) and return its stage means."""
    with tempfile.TemporaryDirectory() as run_dir:
        config = load_config(recipe, [
            f"run_dir={run_dir}", f"train.steps={steps}", "sft.steps=20", "data.eval_size=64", "checkpoint.every=0",
            "logging.progress_bar=false", "logging.sinks=[jsonl]", *overrides,
        ])
        get_loop(config.loop)(config, write=lambda _: None)
        return stage_means(next(Path(run_dir).rglob("metrics.jsonl")))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("args", nargs="*", help="[RECIPE.yaml] [key.path=value ...]")
    parser.add_argument("--steps", type=int, default=6)
    ns = parser.parse_args()
    has_recipe = bool(ns.args) and "=" not in ns.args[0]
    ns.recipe = ns.args[0] if has_recipe else str(RECIPES / "reasoning_gym.yaml")
    ns.overrides = ns.args[1:] if has_recipe else ns.args
    means = run_recipe_steps(ns.recipe, ns.steps, ["eval.every=1", *ns.overrides])
    emit({"recipe": Path(ns.recipe).name, "overrides": ns.overrides, "steps_measured": ns.steps - 1,
          "seconds": {k: round(v, 4) for k, v in means.items()},
          "reward_share_of_step": round(means.get("time/reward", 0.0) / means["time/step"], 4),
          "eval_share_of_step": round(means.get("time/eval", 0.0) / means["time/step"], 4)})


if __name__ == "__main__":
    main()
