"""Every shipped recipe over several seeds: the table of docs/algorithms.md ("Every recipe, 5 seeds").

    .venv/bin/python benchmarks/recipe_sweeps.py --out runs/recipe_sweeps [--only grpo,ppo] [--seeds 5]
    .venv/bin/python benchmarks/recipe_sweeps.py --out runs/recipe_sweeps --table-only
    .venv/bin/python benchmarks/recipe_sweeps.py --out runs/recipe_sweeps --in-process --only ...

The SFT warm-up runs once per seed (``recipes/sft.yaml``, ``seed=S``); every online preset and the
reward model -> GRPO chain then start from that seed's SFT policy (``rlxf sweep --per-seed
model.path=OUT/sft/seed_{seed}/...``, ``sft.steps=0``), so the presets of one seed share their start.
DPO and online DPO run as shipped (their own SFT stage), and so do tool use and reasoning-gym (tasks of
their own). The reward model -> GRPO chain runs as shipped (500 reward-model steps, 40 GRPO steps);
``*_teacher_only`` is that chain before its rejected answers included the spurious carry. Each
sweep is ``rlxf sweep ... --parallel 1`` (one thread per run); ``--table-only`` rebuilds the table
from the run folders (and each recipe's ``sweep.png``). Prints the markdown table, then each recipe's numbers as JSON.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
from common import emit  # noqa: E402
from rlxf.sweep.report import RECIPES_HEADER, plot_band, recipe_row, summarize  # noqa: E402
from rlxf.sweep.runs import SeedRun, read_curve, seed_overrides  # noqa: E402

RECIPES = Path(__file__).parents[1] / "src" / "rlxf" / "recipes"
RL_STEPS = 20  # per preset, as the slow acceptance tests run fewer steps than the recipe's 100
FROM_SFT = "model.path={out}/sft/seed_{seed}/checkpoints/step_000300/policy"  # {out}, {seed}: filled per run
RM_STEPS = 500  # the recipe's count (250 gave pair accuracy 0.785-0.875, and GRPO gamed the weakest)
RM_CHECKPOINT = f"checkpoints/step_{RM_STEPS:06d}/reward_model"

PRESETS = ["grpo", "ppo", "dr_grpo", "dapo", "rloo", "reinforce_pp", "reinforce_pp_baseline", "remax", "gspo",
           "cispo"]


def _preset(name: str) -> tuple[str, str | None, list[str], list[str]]:
    recipe = "dapo.yaml" if name == "dapo" else None  # DAPO's recipe: a 1-token overlong buffer for 6 tokens
    return (name, recipe, ["sft.steps=0", f"algorithm.name={name}", f"train.steps={RL_STEPS}", "eval.every=10",
                           "checkpoint.every=0"], [FROM_SFT])


# (name, recipe, overrides, per-seed overrides); in order: a sweep only needs the ones above it
SWEEPS = [
    ("sft", "sft.yaml", [], []),
    ("default_as_shipped", "default.yaml", [], []),  # the default recipe exactly as shipped: its own SFT, 100 steps
    ("ppo_as_shipped", "default.yaml", ["algorithm.name=ppo"], []),  # the same with PPO
    *[_preset(name) for name in PRESETS],
    ("dpo", "dpo.yaml", [], []),  # as shipped, with its own SFT stage (the command-line check)
    ("online_dpo", "online_dpo.yaml", [], []),
    ("reward_model", "reward_model.yaml", ["sft.steps=0", f"preference.steps={RM_STEPS}"], [FROM_SFT]),
    ("grpo_reward_model", "grpo_reward_model.yaml", ["sft.steps=0", "eval.every=10", "checkpoint.every=0"],
     [FROM_SFT, f"reward.kwargs.path={{out}}/reward_model/seed_{{seed}}/{RM_CHECKPOINT}"]),  # the recipe's 40 steps
    # before the carry-flipped rejected answers: the sloppy teacher's mistakes alone (GRPO ran 20 steps)
    ("reward_model_teacher_only", "reward_model.yaml",
     ["sft.steps=0", f"preference.steps={RM_STEPS}", "data.task_args.rejected={teacher: 1}"], [FROM_SFT]),
    ("grpo_reward_model_teacher_only", "grpo_reward_model.yaml",
     ["sft.steps=0", f"train.steps={RL_STEPS}", "eval.every=10", "checkpoint.every=0"],
     [FROM_SFT, f"reward.kwargs.path={{out}}/reward_model_teacher_only/seed_{{seed}}/{RM_CHECKPOINT}"]),
    ("tool_use", "tool_use.yaml", [], []),
    ("reasoning_gym", "reasoning_gym.yaml", [], []),
]


def filled(templates: list[str], out: Path) -> list[str]:
    """Overrides with ``{out}`` filled in (``{seed}`` is left to ``--per-seed``)."""
    return [t.replace("{out}", str(out)) for t in templates]


def sweep_command(name: str, recipe: str | None, overrides: list[str], per_seed: list[str], out: Path,
                  seeds: list[int]) -> list[str]:
    fills = [f"--per-seed={p}" for p in filled(per_seed, out)]
    return [sys.executable, "-m", "rlxf.cli", "sweep", *([str(RECIPES / recipe)] if recipe else []),
            *filled(overrides, out),
            *fills, "--first-seed", str(seeds[0]), "--seeds", str(len(seeds)), "--parallel", "1", "--out", str(out / name)]


def finished(run_dir: Path) -> bool:
    """The run wrote its summary and no stop signal cut it short (a stopped run writes one too)."""
    summary = run_dir / "summary.json"
    return summary.exists() and "stopped_by" not in json.loads(summary.read_text())


def run_in_process(name: str, recipe: str | None, overrides: list[str], per_seed: list[str], out: Path,
                   seeds: list[int]) -> None:
    """The sweep's runs one after another in this process, as ``rlxf sweep`` would start them (the same
    config, seed, one thread). On a loaded machine a new process spent ~3 minutes importing before its
    first step; here the imports are paid once. A seed whose ``summary.json`` exists is skipped."""
    from rlxf.checked_config import load_config
    from rlxf.loops import get_loop

    (out / name).mkdir(parents=True, exist_ok=True)
    for seed in seeds:
        run_dir = out / name / f"seed_{seed}"
        if finished(run_dir):
            continue
        fills = seed_overrides(filled(per_seed, out), seed)
        for path in (Path(f.split("=", 1)[1]) for f in fills if f.split("=", 1)[0].endswith("path")):
            while not path.exists():  # another sweep (the SFT runs) is still writing this seed's start
                time.sleep(20)
        config = load_config(str(RECIPES / recipe) if recipe else None,
                             [*filled(overrides, out), *fills, f"seed={seed}", f"run_dir={run_dir}", "threads=1",
                              "logging.progress_bar=false", "logging.plot=false"])
        with open(out / name / f"seed_{seed}.log", "a") as log:
            get_loop(config.loop)(config, write=lambda text: print(text, file=log, flush=True))


def read_runs(folder: Path, seeds: list[int]) -> list[SeedRun]:
    """Each seed's run as its folder holds it (a run without summary.json counts as failed)."""
    runs = []
    for seed in seeds:
        run_dir = folder / f"seed_{seed}"
        done = finished(run_dir)
        wall = json.loads((run_dir / "summary.json").read_text())["wall_seconds"] if done else 0.0
        runs.append(SeedRun(seed, run_dir, 0 if done else 1, wall, read_curve(run_dir, "eval/accuracy")))
    return runs


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default="runs/recipe_sweeps")
    parser.add_argument("--seeds", type=int, default=5)
    parser.add_argument("--first-seed", type=int, default=0)
    parser.add_argument("--only", default="", help="comma-separated sweep names (default: all, in order)")
    parser.add_argument("--table-only", action="store_true")
    parser.add_argument("--in-process", action="store_true",
                        help="run every seed of every sweep in this process (no start-up per run)")
    ns = parser.parse_args()
    out = Path(ns.out).resolve()
    seeds = list(range(ns.first_seed, ns.first_seed + ns.seeds))
    chosen = [s for s in SWEEPS if not ns.only or s[0] in ns.only.split(",")]
    if not ns.table_only:
        for name, recipe, overrides, per_seed in chosen:
            if ns.in_process:
                run_in_process(name, recipe, overrides, per_seed, out, seeds)
            else:
                subprocess.run(sweep_command(name, recipe, overrides, per_seed, out, seeds), check=False)
    print(RECIPES_HEADER)
    results = {}
    for name, *_ in chosen:
        if (out / name).is_dir():
            runs = read_runs(out / name, seeds)
            results[name] = summarize(runs, "eval/accuracy")
            if results[name]["per_seed"]:
                print(recipe_row(name, results[name]))
                plot_band(runs, "eval/accuracy", out / name / "sweep.png", f"{name}: {len(seeds)} seeds")
    for name, summary in results.items():
        emit({"recipe": name, **{k: summary.get(k) for k in ("initial", "final", "gain", "worst_seed", "failed",
                                                                 "wall_seconds")}})


if __name__ == "__main__":
    main()
