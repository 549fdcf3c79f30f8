"""Per-sample cost and throughput of every built-in reward, and its share of a default-recipe step.

    python benchmarks/reward_speed.py [--batches 64 512] [--workers N] [--step-steps 4] [--only arithmetic,math]

For each reward and batch size: seconds per batch and per sample and samples/s on one core (the reward
as configured, one thread) and on N cores (rule rewards through ``function: parallel`` over N processes;
the code sandbox with N programs at once; the reward model and the judge's engine with N torch threads;
the remote reward with N requests in flight), and
``share_of_default_step``: the single-core cost of scoring one default step's samples (prompts_per_step
x n_samples) over the default recipe's measured step time (``time/step``, run in the same process
first). Prints JSON. Samples are made-up trajectories of each reward's task, half right and half wrong.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))

import torch  # noqa: E402

from common import emit, median  # noqa: E402
from reward_stage_share import RECIPES, run_recipe_steps  # noqa: E402
from rlxf.checked_config import load_config  # noqa: E402
from rlxf.rewards.base import call_reward  # noqa: E402
from rlxf.rewards.parallel import ParallelReward  # noqa: E402
from rlxf.rewards.registry import build_reward  # noqa: E402

Samples = tuple[list[str], list[str], list[dict]]

REASONING_GYM_DATASETS = ("basic_arithmetic", "chain_sum", "spell_backward", "word_sorting", "leg_counting")


def arithmetic_samples(n: int) -> Samples:
    prompts = [f"{100 + i}+{i % 10}=" for i in range(n)]
    answers = [str(100 + i + i % 10) for i in range(n)]
    responses = [a if i % 2 == 0 else str(int(a) + 1) for i, a in enumerate(answers)]
    return prompts, responses, [{"answer": a, "stopped": i % 3 != 0} for i, a in enumerate(answers)]


def numeric_math_samples(n: int) -> Samples:
    """GSM8K-like: integer references, one per group of 8; half the answers right, the rest off by 1-7."""
    refs = [10 * (i // 8) + 3 for i in range(n)]
    responses = [f"so the total is \\boxed{{{r if i % 2 == 0 else r + i % 8}}}" for i, r in enumerate(refs)]
    return ["Solve."] * n, responses, [{"answer": str(r)} for r in refs]


def latex_math_samples(n: int) -> Samples:
    """MATH-like: a fraction per group of 8, answered in eight forms (equivalent LaTeX, decimal, root,
    wrong, symbolic) so that most samples need math-verify's parser and some its simplifier."""
    def forms(g: int) -> list[str]:
        return [f"\\frac{{{2 * g + 2}}}{{4}}", f"{(g + 1) / 2}", f"\\dfrac{{{g + 1}}}{{2}}", f"\\frac{{{g}}}{{2}}",
                f"\\sqrt{{{(g + 1) ** 2}}}/2", f"x+{g}", f"{g + 1}/2", "\\frac{1}{3}"]
    responses = [f"\\boxed{{{forms(i // 8)[i % 8]}}}" for i in range(n)]
    return ["Solve."] * n, responses, [{"answer": f"\\frac{{{i // 8 + 1}}}{{2}}"} for i in range(n)]


def reasoning_gym_samples(dataset: str) -> Callable[[int], Samples]:
    def build(n: int) -> Samples:
        import reasoning_gym

        entries = list(reasoning_gym.create_dataset(dataset, size=n, seed=0))
        responses = [str(e["answer"]) if i % 2 == 0 else f"<answer>{e['answer']}x</answer>" for i, e in enumerate(entries)]
        return [e["question"] for e in entries], responses, [{"rg_entry": e} for e in entries]

    return build


def code_samples(n: int) -> Samples:
    right = "```python\na, b = map(int, input().split())\nprint(a + b)\n```"
    wrong = "```python\na, b = map(int, input().split())\nprint(a - b)\n```"
    tests = [{"input": "1 2\n", "output": "3\n"}, {"input": "5 5\n", "output": "10\n"}]
    return ["Add two numbers."] * n, [right if i % 2 == 0 else wrong for i in range(n)], [{"tests": tests}] * n


def build_tiny_checkpoints(root: Path) -> tuple[str, str]:
    """A tiny sequence classifier (the reward model) and a tiny causal LM (the judge), built locally."""
    from transformers import LlamaForSequenceClassification

    from rlxf.models.char_tokenizer import build_char_tokenizer
    from rlxf.models.tiny import build_tiny_model, tiny_llama_config

    tokenizer = build_char_tokenizer()
    config = tiny_llama_config(len(tokenizer), hidden_size=64, num_layers=2, num_heads=2, intermediate_size=128)
    config.num_labels = 1
    torch.manual_seed(0)
    LlamaForSequenceClassification(config).save_pretrained(root / "rm")
    tokenizer.save_pretrained(root / "rm")
    judge = build_tiny_model(root / "judge", hidden_size=64, num_layers=2, num_heads=2, intermediate_size=128)
    return str(root / "rm"), str(judge)


def reward_table(models: tuple[str, str], server_url: str) -> dict[str, dict]:
    """name -> {spec, samples, kind}; kind says how the multi-core run spreads the work."""
    rm_path, judge_path = models
    table = {
        "arithmetic": {"spec": {"function": "arithmetic"}, "samples": arithmetic_samples, "kind": "rule"},
        "math (numeric answers, fallback only)": {"spec": {"function": "math", "kwargs": {"use_math_verify": False}},
                                                  "samples": numeric_math_samples, "kind": "rule"},
        "math (numeric answers, math-verify)": {"spec": {"function": "math"}, "samples": numeric_math_samples,
                                                "kind": "rule", "caches": True},
        "math (LaTeX answers, fallback only)": {"spec": {"function": "math", "kwargs": {"use_math_verify": False}},
                                                "samples": latex_math_samples, "kind": "rule"},
        "math (LaTeX answers, math-verify)": {"spec": {"function": "math"}, "samples": latex_math_samples,
                                              "kind": "rule", "caches": True},
        "format": {"spec": {"function": "format", "kwargs": {"pattern": r"\s*-?\d+\s*", "max_tokens": 6,
                                                               "overlong_buffer": 2}},
                   "samples": arithmetic_samples, "kind": "rule"},
        "mix (arithmetic + format)": {
            "spec": {"function": "mix", "kwargs": {"rewards": [
                {"function": "arithmetic"}, {"function": "format", "kwargs": {"max_tokens": 6}, "weight": 0.5}]}},
            "samples": arithmetic_samples, "kind": "rule"},
        "code tests (sandbox)": {"spec": {"function": "code_tests"}, "samples": code_samples, "kind": "sandbox"},
        "reward model (tiny)": {"spec": {"function": "reward_model", "kwargs": {"path": rm_path, "batch_size": 64}},
                                "samples": arithmetic_samples, "kind": "torch"},
        "judge (built-in engine, tiny)": {
            "spec": {"function": "judge", "kwargs": {"backend": "engine", "backend_kwargs": {
                "path": judge_path, "max_new_tokens": 8, "batch_size": 64}}},
            "samples": arithmetic_samples, "kind": "torch"},
        "remote (arithmetic via serve-reward)": {
            "spec": {"function": "remote", "kwargs": {"url": server_url, "timeout_seconds": 60}},
            "samples": arithmetic_samples, "kind": "io"},
    }
    for dataset in REASONING_GYM_DATASETS:
        table[f"reasoning_gym ({dataset})"] = {"spec": {"function": "reasoning_gym"},
                                               "samples": reasoning_gym_samples(dataset), "kind": "rule"}
    return table


def time_call(fn: Callable[[], object], warm_up: Callable[[], object], reps: int) -> float:
    warm_up()  # imports, pools, models
    seconds = []
    for _ in range(reps):
        start = time.perf_counter()
        fn()
        seconds.append(time.perf_counter() - start)
    return median(seconds)


def multi_core_reward(entry: dict, workers: int):
    """The reward spread over ``workers``: a process pool, threads in flight, or torch threads (None)."""
    if entry["kind"] == "rule":
        return ParallelReward(entry["spec"], workers=workers)
    if entry["kind"] == "io":
        return ParallelReward(entry["spec"], workers=workers, executor="thread")
    if entry["kind"] == "sandbox":
        return build_reward(entry["spec"]["function"], {**(entry["spec"].get("kwargs") or {}), "max_workers": workers})
    return None  # torch rewards: more intra-op threads


def one_core_reward(entry: dict):
    kwargs = dict(entry["spec"].get("kwargs") or {})
    if entry["kind"] == "sandbox":
        kwargs["max_workers"] = 1  # the sandbox's own pool: one program at a time
    return build_reward(entry["spec"]["function"], kwargs)


def measure(entry: dict, batch: int, workers: int, reps: int) -> dict[str, float]:
    samples = entry["samples"](batch)
    # Warm-up on other samples of the same kind (one group of every form: sympy imports parts of itself
    # on first use), so per-text caches (math-verify's parses) stay cold for the timed samples.
    def warm(n: int) -> Samples:
        return tuple(part[batch: batch + n] for part in entry["samples"](batch + n))  # type: ignore[return-value]

    warm_one, warm_many = warm(8), warm(16 * workers)  # each process of a pool gets two whole groups
    single = one_core_reward(entry)
    torch.set_num_threads(1)
    one = time_call(lambda: call_reward(single, *samples), lambda: call_reward(single, *warm_one), reps)
    multi = multi_core_reward(entry, workers)
    if multi is None:
        torch.set_num_threads(workers)
        many = time_call(lambda: call_reward(single, *samples), lambda: None, reps)
    else:
        many = time_call(lambda: call_reward(multi, *samples), lambda: call_reward(multi, *warm_many), reps)
        if hasattr(multi, "close"):
            multi.close()
    torch.set_num_threads(1)
    return {"batch_seconds_1core": one, "us_per_sample_1core": one / batch * 1e6, "samples_per_s_1core": batch / one,
            f"batch_seconds_{workers}core": many, f"samples_per_s_{workers}core": batch / many,
            "multi_core_speedup": one / many}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--batches", type=int, nargs="+", default=[64, 512])
    parser.add_argument("--workers", type=int, default=os.cpu_count() or 2)
    parser.add_argument("--reps", type=int, default=3)
    parser.add_argument("--step-steps", type=int, default=4, help="default-recipe steps timed (the first is dropped)")
    parser.add_argument("--only", default="", help="comma-separated substrings of reward names")
    ns = parser.parse_args()

    from rlxf.rewards.server import start_reward_server

    torch.set_num_threads(1)
    default = load_config(str(RECIPES / "default.yaml"), [])
    samples_per_step = default.train.prompts_per_step * default.rollout.n_samples
    step = run_recipe_steps(str(RECIPES / "default.yaml"), ns.step_steps, ["eval.every=0"])
    step_seconds = step["time/step"]
    with tempfile.TemporaryDirectory() as root:
        server = start_reward_server(build_reward("arithmetic"), "arithmetic")
        try:
            table = reward_table(build_tiny_checkpoints(Path(root)), server.url)
            wanted = [w for w in ns.only.split(",") if w]
            rows = {}
            for name, entry in table.items():
                if wanted and not any(w in name for w in wanted):
                    continue
                rows[name] = {"kind": entry["kind"]}
                for batch in ns.batches:
                    # One timed run where a repeat would find per-text caches warm (math-verify's parses).
                    reps = ns.reps if entry["kind"] == "rule" and not entry.get("caches") else 1
                    result = measure(entry, batch, ns.workers, reps)
                    rows[name][str(batch)] = {k: round(v, 6) for k, v in result.items()}
                per_sample = rows[name][str(max(ns.batches))]["us_per_sample_1core"] * 1e-6
                rows[name]["share_of_default_step"] = round(per_sample * samples_per_step / step_seconds, 5)
                print(name, rows[name]["share_of_default_step"], file=sys.stderr, flush=True)
        finally:
            server.stop()
    emit({"default_step_seconds": round(step_seconds, 4), "default_step_samples": samples_per_step,
          "default_step_reward_seconds": round(step.get("time/reward", 0.0), 5), "workers": ns.workers,
          "cpu_count": os.cpu_count(), "rewards": rows})


if __name__ == "__main__":
    main()
