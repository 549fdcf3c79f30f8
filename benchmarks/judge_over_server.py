"""A real LLM as a judge over a real OpenAI-compatible server: vLLM's CPU build serving a model folder, the
``judge`` reward's ``openai`` backend asking it, on a labelled held-out set.

    python benchmarks/judge_over_server.py --judge FOLDER [--server-python .venv-vllm/bin/python] \\
        [--eval-size 50] [--ks 1,3,5] [--temperature 0.7] [--concurrency 8] [--rubrics one_turn,solve_first,reference]

The set: the real-model recipe's held-out sums asked in words ("What is 47 plus 8?"), each with one answer
written as the trained policy writes it ("47 + 8 = 55."): the true sum for half the problems, a near miss
(+-1, +-10) for the other half. Pointwise rubrics in plain words, the judge reasoning before its ``Score: 1`` /
``Score: 0``: ``one_turn`` (question and answer at once), ``solve_first`` (the question alone, the judge's
own working, then the answer: reference-guided without a reference), ``reference`` (the true sum shown).
Per rubric: greedy verdict accuracy, then ``max(ks)`` sampled judgments per answer at ``--temperature``,
majority-voted over the first k for each k (the k-curve), the share of unparseable replies, and the spread
(how often the k samples disagree). Pairwise: the true and the near-miss answer as A and B in both orders,
``[[A]]`` / ``[[B]]`` / ``[[tie]]``: accuracy, position bias (> 0: favours A) and consistency. The server's
latency (per request, under the judge's ``--concurrency`` parallel requests) and throughput (judgments/s)
come from timing each request. The server is started here on loopback and stopped at the end: ``--server vllm`` (``python -m
vllm.entrypoints.openai.api_server``, docs/rewards.md) or ``--server transformers`` (``transformers serve``,
in the default environment). Prints JSON.
"""

from __future__ import annotations

import argparse
import os
import random
import re
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))

from common import emit  # noqa: E402
from rl_step_vs_trl import sums_in_words_splits  # noqa: E402
from rlxf.data.math_judge_rubrics import NEAR_MISSES, PAIRWISE, RUBRICS  # noqa: E402
from rlxf.rewards.judge import JudgeReward  # noqa: E402
from rlxf.rewards.judge_agreement import position_report  # noqa: E402
from rlxf.rewards.judge_parsing import parse_pairwise_verdict  # noqa: E402
from rlxf.rewards.judge_votes import combine_samples  # noqa: E402
from rlxf.serving.ports import bound_socket  # noqa: E402

VLLM_SERVER = "vllm.entrypoints.openai.api_server"
TRANSFORMERS_SERVE = "import sys; from transformers.cli.transformers import main; sys.argv[0] = 'transformers'; sys.exit(main())"


def labelled_answers(size: int, seed: int = 0) -> list[dict]:
    """Held-out problems, each with one answer (true on even rows, a near miss on odd ones) and its label."""
    rng = random.Random(seed)
    rows = []
    for i, problem in enumerate(sums_in_words_splits().eval[:size]):
        a, b = map(int, re.findall(r"\d+", problem["prompt"]))
        wrong = a + b + rng.choice([d for d in NEAR_MISSES if a + b + d >= 0])  # no negative sums: too easy
        claim = a + b if i % 2 == 0 else wrong
        rows.append({"prompt": problem["prompt"], "answer": str(a + b), "response": f"{a} + {b} = {claim}.",
                     "label": int(claim == a + b), "wrong": f"{a} + {b} = {wrong}.",
                     "right": f"{a} + {b} = {a + b}."})
    return rows


def vllm_command(python: str, folder: str, port: int) -> list[str]:
    return [python, "-m", VLLM_SERVER, "--model", folder, "--host", "127.0.0.1", "--port", str(port),
            "--dtype", "float32", "--max-model-len", "1024", "--enforce-eager"]


def transformers_command(python: str, folder: str, port: int) -> list[str]:
    return [python, "-c", TRANSFORMERS_SERVE, "serve", folder, "--host", "127.0.0.1", "--port", str(port)]


# --server: how each OpenAI-compatible server is started (the model served is ``folder``)
SERVERS = {"vllm": vllm_command, "transformers": transformers_command}


def start_server(kind: str, python: str, folder: str, log: Path) -> tuple[subprocess.Popen, str]:
    """The server on a free loopback port; returns once ``/health`` answers."""
    with bound_socket("127.0.0.1", 0) as probe:
        port = probe.getsockname()[1]
    env = {**os.environ, "VLLM_CPU_KVCACHE_SPACE": os.environ.get("VLLM_CPU_KVCACHE_SPACE", "2"),
           "VLLM_CPU_OMP_THREADS_BIND": "nobind"}
    command = SERVERS[kind](python, folder, port)
    server = subprocess.Popen(command, env=env, stdout=log.open("w"), stderr=subprocess.STDOUT)
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 600
    while time.monotonic() < deadline:
        if server.poll() is not None:
            raise RuntimeError(f"the {kind} server exited with {server.returncode}; its log: {log}")
        try:
            with urllib.request.urlopen(f"{url}/health", timeout=5) as reply:
                if reply.status == 200:
                    return server, url + "/v1"
        except OSError:
            time.sleep(2)
    server.terminate()
    raise RuntimeError(f"the {kind} server did not answer /health in 600 s; its log: {log}")


class TimedJudge:
    """The ``judge`` reward on the server, with each request's latency recorded."""

    def __init__(self, url: str, model: str, rubric, temperature: float, args) -> None:
        self.reward = JudgeReward(backend="openai", rubric=rubric, min_score=0, max_score=1, default_score=-1.0,
                                  backend_kwargs={"url": url, "model": model, "max_tokens": args.max_tokens,
                                                  "temperature": temperature, "max_parallel": args.concurrency,
                                                  "timeout_seconds": 300})
        self.latencies: list[float] = []
        ask = self.reward.backend.ask

        def timed(prompt):
            start = time.perf_counter()
            try:
                return ask(prompt)
            finally:
                self.latencies.append(time.perf_counter() - start)

        self.reward.backend.ask = timed

    def replies(self, rows: list[dict], times: int) -> list[list[str | None]]:
        cases = [(row["prompt"], row["response"], row) for row in rows for _ in range(times)]
        flat = self.reward.converse(cases)
        return [flat[i * times:(i + 1) * times] for i in range(len(rows))]


def pointwise(url: str, model: str, rubric, rows: list[dict], args) -> dict:
    result = {}
    greedy = TimedJudge(url, model, rubric, 0.0, args)
    start = time.perf_counter()
    replies = greedy.replies(rows, 1)
    result["greedy"] = accuracy(greedy, rows, replies, 1, time.perf_counter() - start)
    sampled = TimedJudge(url, model, rubric, args.temperature, args)
    start = time.perf_counter()
    replies = sampled.replies(rows, max(args.ks))
    seconds = time.perf_counter() - start
    result["sampled"] = {f"k{k}": accuracy(sampled, rows, replies, k) for k in args.ks}
    result["sampled_server"] = server_figures(sampled.latencies, seconds)
    result["example_reply"] = replies[0][0]
    return result


def accuracy(judge: TimedJudge, rows: list[dict], replies, k: int, seconds: float | None = None) -> dict:
    right, malformed, spread = [], [], []
    for row, samples in zip(rows, replies):
        parsed = [judge.reward.normalized(r) for r in samples[:k]]  # None: unparseable
        score, deviation = combine_samples(parsed, "vote")  # the vote over the first k (None: none parsed)
        right.append(score is not None and int(score >= 0.5) == row["label"])
        malformed.append(sum(p is None for p in parsed) / k)
        spread.append(deviation)
    out = {"accuracy": round(sum(right) / len(rows), 3), "malformed": round(statistics.mean(malformed), 3),
           "mean_spread": round(statistics.mean(spread), 3)}
    if seconds is not None:
        out.update(server_figures(judge.latencies, seconds))
    return out


def server_figures(latencies: list[float], seconds: float) -> dict:
    return {"requests": len(latencies), "judgments_per_s": round(len(latencies) / seconds, 2),
            "latency_median_s": round(statistics.median(latencies), 2),
            "latency_p90_s": round(sorted(latencies)[int(0.9 * (len(latencies) - 1))], 2)}


def pairwise(url: str, model: str, rows: list[dict], args) -> dict:
    judge = TimedJudge(url, model, "{prompt}", 0.0, args)
    cases, meta = [], []
    for i, row in enumerate(rows):
        for order, (a, b) in enumerate(((row["right"], row["wrong"]), (row["wrong"], row["right"]))):
            cases.append(PAIRWISE.format(prompt=row["prompt"], a=a, b=b))
            meta.append({"pair": str(i), "order": order, "label": "A" if order == 0 else "B"})
    start = time.perf_counter()
    replies = judge.reward.backend.generate(cases)
    seconds = time.perf_counter() - start
    said = [parse_pairwise_verdict(reply, conflicts="reject") if reply else None for reply in replies]
    return {"accuracy": round(sum(v == m["label"] for v, m in zip(said, meta)) / len(meta), 3),
            "malformed": round(sum(v is None for v in said) / len(said), 3), **position_report(said, meta),
            **server_figures(judge.latencies, seconds), "example_reply": replies[0]}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--judge", required=True, help="a model folder vLLM can serve (the judge)")
    parser.add_argument("--server", choices=sorted(SERVERS), default="vllm")
    parser.add_argument("--server-python", default=None, help="default: .venv-vllm's for vllm, this one's else")
    parser.add_argument("--eval-size", type=int, default=50)
    parser.add_argument("--ks", default="1,3,5")
    parser.add_argument("--temperature", type=float, default=0.7)
    parser.add_argument("--concurrency", type=int, default=8)
    parser.add_argument("--max-tokens", type=int, default=160)
    parser.add_argument("--rubrics", default="one_turn,solve_first,reference")
    args = parser.parse_args()
    args.ks = [int(k) for k in args.ks.split(",")]
    rows = labelled_answers(args.eval_size)
    log = Path(tempfile.mkdtemp(prefix="rlxf-judge-server-")) / "vllm.log"
    start = time.perf_counter()
    python = args.server_python or (".venv-vllm/bin/python" if args.server == "vllm" else sys.executable)
    server, url = start_server(args.server, python, args.judge, log)
    result = {"benchmark": "judge_over_server", "judge": Path(args.judge).name, "server": f"{args.server} (CPU, fp32)",
              "rows": len(rows), "right_share": sum(r["label"] for r in rows) / len(rows),
              "concurrency": args.concurrency, "temperature": args.temperature,
              "server_start_s": round(time.perf_counter() - start, 1), "pointwise": {}}
    try:
        for name in args.rubrics.split(","):
            result["pointwise"][name] = pointwise(url, args.judge, RUBRICS[name], rows, args)
        result["pairwise"] = pairwise(url, args.judge, rows, args)
    finally:
        server.terminate()
        server.wait(timeout=60)
    result["wall_s"] = round(time.perf_counter() - start, 1)
    emit(result)


if __name__ == "__main__":
    main()
