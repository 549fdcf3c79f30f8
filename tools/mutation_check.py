"""Mutation check of the core numeric code: does each small bug make a fast test fail?

    python tools/mutation_check.py                       # every target module (tens of minutes)
    python tools/mutation_check.py --modules algos/kl.py --sample 20
    python tools/mutation_check.py --list                # the mutants, without running anything
    make mutation MUTATION_ARGS="--modules train/*"

For every target module, every mutant (tools/mutants.py) is applied alone to a scratch copy of
``src/`` and the module's fast test files are run against it (``pytest -x``, a time limit per
mutant). A mutant is *killed* when a test fails (or it times out), and *survives* when every test
passes. A survivor listed in ``tools/mutation_equivalents.txt`` with a reason is *equivalent* (no
test can tell it from the original); any other survivor makes the exit code 1.

Output: a table on stdout, ``report.json`` (every mutant and its outcome) and ``survivors.txt`` under
``--out`` (``runs/mutation`` by default). docs/testing.md has the last full run's numbers.
"""

from __future__ import annotations

import argparse
import fnmatch
import json
import os
import random
import signal
import sys
import time
from collections import Counter
from pathlib import Path

from mutant_runner import Outcome, ScratchTree, TestRunner, preload
from mutants import Mutant, module_mutants

REPO = Path(__file__).resolve().parent.parent
# Each module's tests run in stages, cheapest and most direct first; a mutant killed by an early stage
# never pays for the later ones (a survivor runs them all).
ALGOS_TESTS = [["tests/algos"], ["tests/train/test_dr_grpo_budget.py", "tests/core/test_policy_update.py"]]
MICRO_TESTS = [["tests/train/test_micro_batches.py", "tests/runtime/test_dp_split.py",
                "tests/train/test_metric_reduction.py"], ["tests/core/test_policy_update.py"]]
PPO_TESTS = [["tests/train/test_dr_grpo_budget.py", "tests/runtime/test_dp_split.py"],
             ["tests/core/test_policy_update.py"]]
# The SIGKILL-resume test (about 90 s) runs last, on its own: only the mutants the rest let through pay for it.
SIGKILL_RESUME = "tests/core/test_loop.py::test_resume_after_sigkill_matches_an_uninterrupted_run"
RL_TESTS = [["tests/core/test_loop.py", "tests/loops/test_rl_stages.py", f"--deselect={SIGKILL_RESUME}"],
            [SIGKILL_RESUME]]
# A module's own test files run first, as a stage of their own (plus any tests/**/test_mutants_<stem>.py).
OWN_TESTS = {
    "advantages": ["tests/algos/test_advantages.py"], "aggregation": ["tests/algos/test_aggregation.py"],
    "config": ["tests/algos/test_config.py"], "critic_loss": ["tests/algos/test_value_loss.py"],
    "dapo": ["tests/algos/test_dapo_and_groups.py"], "groups": ["tests/algos/test_dapo_and_groups.py"],
    "importance_sampling": ["tests/algos/test_policy_loss.py"], "kl": ["tests/algos/test_kl.py"],
    "masked": ["tests/algos/test_aggregation.py"], "policy_losses": ["tests/algos/test_policy_loss.py"],
    "policy_objective": ["tests/algos/test_policy_loss.py"], "preference_losses": ["tests/algos/test_preference_losses.py"],
    "presets": ["tests/algos/test_config.py"], "sft": ["tests/algos/test_aggregation.py"],
    "rollout_masks": ["tests/algos/test_rollout_masks.py"], "mismatch_metrics": ["tests/algos/test_rollout_masks.py"],
}
# (module glob relative to the source root, the stages of fast tests that cover it), first match wins.
TARGETS: list[tuple[str, list[list[str]]]] = [
    ("rlxf/algos/*.py", ALGOS_TESTS),
    ("rlxf/train/micro_batches.py", MICRO_TESTS),
    ("rlxf/train/ppo_batches.py", PPO_TESTS),
    ("rlxf/loops/rl.py", RL_TESTS),
]
PRELOAD = "torch,numpy,sympy,pydantic,transformers,pytest,safetensors,yaml,hypothesis"
STATUSES = ("killed", "timeout", "survived", "equivalent", "error")


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter,
                                epilog="Example: python tools/mutation_check.py --modules 'algos/k*' --sample 10")
    p.add_argument("--root", type=Path, default=REPO / "src", help="source root copied for each run (default: src)")
    p.add_argument("--modules", nargs="*", default=[],
                   help="globs over module paths under the root, e.g. 'algos/*' or 'rlxf/train/ppo_batches.py' "
                        "(default: every target)")
    p.add_argument("--tests", nargs="*", default=None,
                   help="pytest arguments to run for every module (default: each target's own test files)")
    p.add_argument("--sample", type=int, default=0, help="run N randomly chosen mutants per module (0: all)")
    p.add_argument("--seed", type=int, default=0, help="seed of --sample")
    p.add_argument("--timeout-factor", type=float, default=4.0, help="per-mutant limit: this x the clean run")
    p.add_argument("--min-timeout", type=float, default=30.0, help="per-mutant limit at least this (seconds)")
    p.add_argument("--equivalents", type=Path, default=REPO / "tools" / "mutation_equivalents.txt")
    p.add_argument("--out", type=Path, default=REPO / "runs" / "mutation")
    p.add_argument("--no-fork", action="store_true", help="a python subprocess per mutant instead of a fork")
    p.add_argument("--preload", default=PRELOAD, help="comma-separated packages imported once before forking")
    p.add_argument("--keep-logs", action="store_true", help="keep each mutant's pytest output under --out/logs")
    p.add_argument("--rerun", type=Path, default=None,
                   help="a report.json: run only the mutants that survived (or were equivalent) in it")
    p.add_argument("--list", action="store_true", help="print the mutants and exit")
    return p.parse_args(argv)


Stages = list[list[str]]


def selected_modules(root: Path, patterns: list[str], tests_override: list[str] | None) -> list[tuple[str, Stages]]:
    """(module path relative to root, its test stages) for every module the patterns pick."""
    chosen = []
    candidates = sorted(p.relative_to(root).as_posix() for p in root.rglob("*.py"))
    for path in candidates:
        tests = next((t for glob, t in TARGETS if fnmatch.fnmatch(path, glob)), None)
        package_free = path.split("/", 1)[-1]
        if patterns and not any(fnmatch.fnmatch(path, pat) or fnmatch.fnmatch(package_free, pat) for pat in patterns):
            continue
        if tests_override is not None:
            tests = [tests_override]
        elif tests is None:
            continue  # not a target (pass --tests to mutate it anyway)
        else:
            stem = Path(path).stem
            own = OWN_TESTS.get(stem, []) + sorted(p.relative_to(REPO).as_posix()
                                                   for p in (REPO / "tests").rglob(f"test_mutants_{stem}.py"))
            tests = [[t if t.startswith("-") else str(REPO / t) for t in stage] for stage in ([own] if own else []) + tests]
        missing = [t for stage in tests for t in stage if not t.startswith("-") and not Path(t.split("::")[0]).exists()]
        if missing:
            raise SystemExit(f"mutation: test files of {path} not found: {', '.join(missing)}")
        chosen.append((path, tests))
    if not chosen:
        raise SystemExit(f"mutation: no target module under {root} matches {patterns} (see TARGETS, or pass --tests)")
    return chosen


def load_equivalents(path: Path) -> dict[str, str]:
    """key -> reason, from ``module | function | mutation | reason`` lines (# starts a comment line)."""
    if not path.exists():
        return {}
    found = {}
    for number, line in enumerate(path.read_text().splitlines(), 1):
        if not line.strip() or line.lstrip().startswith("#"):
            continue
        key, sep, reason = line.rpartition(" | ")
        if not sep or key.count(" | ") != 2 or not reason.strip():
            raise SystemExit(f"mutation: {path}:{number}: expected 'module | function | mutation | reason'")
        found[key.strip()] = reason.strip()
    return found


def choose(mutants: list[Mutant], sample: int, seed: int) -> list[Mutant]:
    if not sample or sample >= len(mutants):
        return mutants
    picked = random.Random(seed).sample(range(len(mutants)), sample)
    return [mutants[i] for i in sorted(picked)]


def run_stages(runner: TestRunner, stages: Stages, limits: list[float], log_name: str) -> Outcome:
    """Stage after stage until one does not pass; the total time, and the first non-passing outcome."""
    seconds = 0.0
    for i, (stage, limit) in enumerate(zip(stages, limits, strict=True)):
        outcome = runner.run(stage, limit, log_name=f"{log_name}.stage{i}")
        seconds += outcome.seconds
        if outcome.status != "survived":
            break
    return Outcome(outcome.status, seconds, outcome.exit_code, outcome.failed)


def run_module(runner: TestRunner, tree: ScratchTree, path: str, stages: Stages, mutants: list[Mutant],
               limits: list[float], equivalents: dict[str, str], log=print) -> list[dict]:
    original = (tree.root / path).read_text()
    results = []
    try:
        for i, mutant in enumerate(mutants, 1):
            tree.write(path, mutant.apply(original))
            outcome = run_stages(runner, stages, limits, log_name=f"{path.replace('/', '.')}.{i}")
            status = outcome.status
            if status == "survived" and mutant.key in equivalents:
                status = "equivalent"
            results.append({"module": path, "line": mutant.line, "function": mutant.function,
                            "operator": mutant.operator, "mutation": mutant.description, "key": mutant.key,
                            "status": status, "seconds": round(outcome.seconds, 2), "exit_code": outcome.exit_code,
                            "killed_by": outcome.failed if status in ("killed", "timeout") else None,
                            "reason": equivalents.get(mutant.key)})
            log(f"[{i}/{len(mutants)}] {status:10s} {path}:{mutant.line} {mutant.operator:16s} "
                f"{mutant.description} ({outcome.seconds:.1f}s)")
    finally:
        tree.write(path, original)
    return results


def summarise(results: list[dict], modules: list[str]) -> dict[str, dict[str, int]]:
    table = {}
    for path in modules:
        counts = Counter(r["status"] for r in results if r["module"] == path)
        table[path] = {"mutants": sum(counts.values()), **{s: counts.get(s, 0) for s in STATUSES}}
    return table


def print_table(table: dict[str, dict[str, int]]) -> None:
    header = ["module", "mutants", *STATUSES]
    rows = [[path, *(str(c[k]) for k in header[1:])] for path, c in table.items()]
    rows.append(["total", *(str(sum(c[k] for c in table.values())) for k in header[1:])])
    widths = [max(len(r[i]) for r in [header, *rows]) for i in range(len(header))]
    for row in [header, ["-" * w for w in widths], *rows]:
        print("  ".join(cell.ljust(w) if i == 0 else cell.rjust(w) for i, (cell, w) in enumerate(zip(row, widths))))


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    root = args.root.resolve()
    modules = selected_modules(root, args.modules, args.tests)
    equivalents = load_equivalents(args.equivalents)
    plan = [(path, tests, choose(module_mutants(path, (root / path).read_text()), args.sample, args.seed))
            for path, tests in modules]
    if args.rerun is not None:
        again = {r["key"] for r in json.loads(args.rerun.read_text())["mutants"] if r["status"] in ("survived", "equivalent")}
        plan = [(path, tests, [m for m in mutants if m.key in again]) for path, tests, mutants in plan]
        plan = [entry for entry in plan if entry[2]]
    if args.list:
        for path, tests, mutants in plan:
            print(f"# {path}: {len(mutants)} mutants; test stages: {' ; '.join(' '.join(s) for s in tests)}")
            for m in mutants:
                print(f"{path}:{m.line} {m.operator:16s} {m.key}")
        return 0
    args.out.mkdir(parents=True, exist_ok=True)
    log_dir = args.out / "logs" if args.keep_logs else None
    if log_dir:
        log_dir.mkdir(exist_ok=True)
    if not args.no_fork:
        os.environ.setdefault("OMP_NUM_THREADS", "1")  # no OpenMP pool in the parent: children fork cleanly
        preload([m for m in args.preload.split(",") if m])
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))  # a stopped run still removes its scratch copy
    tree = ScratchTree(root)
    package = modules[0][0].split("/")[0].removesuffix(".py")
    runner = TestRunner(tree, package, fork=not args.no_fork, log_dir=log_dir)
    baselines: dict[tuple[str, ...], float] = {}  # a stage's clean run, seconds
    results: list[dict] = []
    start = time.perf_counter()
    try:
        for path, tests, mutants in plan:
            for stage in tests:
                if tuple(stage) not in baselines:  # the clean run: must pass, and sets the time limit
                    runner.write_bytecode = True
                    clean = runner.run(stage, timeout=1800, log_name="baseline")
                    runner.write_bytecode = False
                    if clean.status != "survived":
                        print(f"mutation: the unmutated tests fail (exit {clean.exit_code}): {' '.join(stage)}",
                              file=sys.stderr)
                        return 2
                    baselines[tuple(stage)] = clean.seconds
            limits = [max(args.min_timeout, args.timeout_factor * baselines[tuple(stage)]) for stage in tests]
            print(f"# {path}: {len(mutants)} mutants, clean run {sum(baselines[tuple(s)] for s in tests):.1f}s "
                  f"in {len(tests)} stage(s), limits {', '.join(f'{t:.0f}s' for t in limits)}", flush=True)
            results += run_module(runner, tree, path, tests, mutants, limits, equivalents,
                                  log=lambda line: print(line, flush=True))
    finally:
        tree.cleanup()
    table = summarise(results, [path for path, _, _ in plan])
    survivors = [r for r in results if r["status"] == "survived"]
    report = {"command": " ".join(["tools/mutation_check.py", *(argv if argv is not None else sys.argv[1:])]),
              "sample": args.sample, "seed": args.seed, "seconds": round(time.perf_counter() - start, 1),
              "modules": table, "mutants": results}
    (args.out / "report.json").write_text(json.dumps(report, indent=1))
    (args.out / "survivors.txt").write_text("".join(f"{r['key']}    (line {r['line']}, {r['operator']})\n"
                                                    for r in survivors))
    print()
    print_table(table)
    print(json.dumps({"modules": len(table), "mutants": len(results), "seconds": report["seconds"],
                      **{s: sum(c[s] for c in table.values()) for s in STATUSES}}))
    if survivors:
        print(f"\n{len(survivors)} survivor(s), listed in {args.out / 'survivors.txt'}:")
        for r in survivors:
            print(f"  {r['module']}:{r['line']} {r['function']}: {r['mutation']}")
    return 1 if survivors or any(r["status"] == "error" for r in results) else 0


if __name__ == "__main__":
    sys.exit(main())
