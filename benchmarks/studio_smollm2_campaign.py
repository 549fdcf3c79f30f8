"""A preference campaign on SmolLM2-135M-Instruct's own answers, end to end through the studio: sampled by the
studio, labelled in headless Chromium, AI labels beside the human ones, the export training a Bradley-Terry
reward model and DPO on SmolLM2.

    OMP_NUM_THREADS=1 .venv/bin/python benchmarks/studio_smollm2_campaign.py [--prompts 400] [--rm-steps 30] \\
        [--dpo-steps 30] [--judge-server transformers] [--judge NAME=FOLDER ...] [--keep DIR]

1. ``rlxf studio`` samples the campaign (``POST /api/campaigns/sample``): SmolLM2 as shipped answers the first
   ``--prompts`` train problems of the real-model recipe (``recipes/smollm2_grpo.yaml``'s sums, through its chat
   template), 2 samples at temperature 0.7 and 40 new tokens; a prompt's two answers, when they differ, are a pair.
2. Headless Chromium labels every pair by keyboard as a careful person would: it reads the question and both
   answers off the page and counts an answer right as the ``math`` verifier does (its final answer, here the
   last number it states, matches the sum): A or B where one answer is right, tie where both are, both bad where neither is.
3. AI labellers judge the same pairs through the studio (``POST /api/campaigns/ID/ai-labels``), each given the
   prompt as RL gives it (the chat template rendered): the ``math`` verifier (the rule itself: agreement near 1
   checks the pipeline); each ``--judge`` (default: SmolLM2 itself as shipped; e.g. also the judge
   ``recipes/smollm2_grm.yaml`` trains) as the ``judge`` reward, the one-turn rubric of ``judge_over_server.py``
   asked about the row's own question (``prompt_from: row``, as the trained judge learned it), greedy;
   ``--judge-server``: on rlxf's built-in engine in the studio's process, batched, or over a real OpenAI-compatible
   server started here, ``transformers serve`` or ``vllm`` from ``.venv-vllm``; and, after step 4, the reward
   model trained on the export.
   ``--rm-steps 0 --dpo-steps 0`` stop after the AI labels.
4. The export (the pairs with a winner: ties and both-bad left out) trains ``recipes/smollm2_reward_model.yaml``
   (``--rm-steps``; held-out pair accuracy on the 58 pairs of ``recipes/data/smollm2_sums_pairs.eval.jsonl``, the
   set the shipped reward model is measured on) and DPO on SmolLM2 (``recipes/dpo.yaml`` with the real-model
   settings, ``--dpo-steps``); the DPO policy's greedy accuracy on the recipe's 100 held-out sums, before and
   after, by ``rlxf eval``.

Prints one JSON object: labelling rate and verdict counts, export counts, each AI labeller's agreement (accuracy,
Cohen's kappa), the reward model's and the DPO policy's held-out numbers, each training's wall time.
"""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
from common import emit, operands  # noqa: E402
from judge_over_server import RUBRICS, start_server  # noqa: E402
from rl_step_vs_trl import sums_in_words_splits  # noqa: E402
from rlxf.models.loading import resolve_model_path  # noqa: E402
from rlxf.rewards.math_answer import answers_match, extract_final_answer  # noqa: E402
from rlxf.studio.driver import StudioProcess, label_by_keyboard, launch_chromium, open_labelling  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
HELD_OUT_PAIRS = ROOT / "recipes/data/smollm2_sums_pairs.eval.jsonl"
JUDGE_TOKENS = 96  # the rationale and its `Score:` line
# DPO on SmolLM2: the real-model recipes' learning rate and budget, the sums' reward for the held-out answers
DPO_OVERRIDES = ["preference.optim.lr=1e-6", "preference.optim.grad_clip=1.0", "preference.batch_size=16",
                 "preference.micro_batch_size=4", "preference.loss.nll_weight=0.0", "data.chat_template=true",
                 "rollout.max_new_tokens=40", "reward.function=math", "eval.every=10", "checkpoint.keep_last=1"]


def careful_labeller(prompt: str, left: str, right: str) -> str:
    """The verifier's rule applied by the person: an answer is right when its final answer (the `math` reward's
    extraction: a boxed or tagged answer, else the last number it states) matches the sum."""
    truth = str(sum(operands(prompt)))
    left_right, right_right = (answers_match(extract_final_answer(text)[0], truth) for text in (left, right))
    if left_right == right_right:
        return "tie" if left_right else "both_bad"
    return "A" if left_right else "B"


def run(command: list[str], log: Path) -> float:
    start = time.perf_counter()
    with log.open("w") as out:
        subprocess.run(command, check=True, stdout=out, stderr=subprocess.STDOUT, cwd=ROOT)
    return round(time.perf_counter() - start, 1)


def held_out_comparison(before: str, after: str, work: Path) -> dict:
    """Greedy accuracy of both on the real-model recipe's 100 held-out sums, and the paired difference
    (``rlxf eval --model BEFORE --model AFTER``)."""
    out = work / "eval"
    run([sys.executable, "-m", "rlxf.cli", "eval", "recipes/smollm2_grpo.yaml", "--model", before, "--model", after,
         "--n", "1", "--k", "1", "--out", str(out), "--quiet"], work / "eval.log")
    models = json.loads((out / "eval.json").read_text())["models"]
    return {"greedy_before": models[0]["greedy_accuracy"], "greedy_after": models[1]["greedy_accuracy"],
            "after_vs_before": models[1]["versus_first"]}


def judge_kwargs(server: str, folder: str, work: Path) -> tuple[dict, subprocess.Popen | None]:
    """The ``judge`` reward's kwargs for SmolLM2 judging by the one-turn rubric, greedy, and the server process
    started for it (None for ``engine``: rlxf's built-in engine in the studio's process, batched)."""
    judge = {"rubric": RUBRICS["one_turn"], "prompt_from": "row", "min_score": 0, "max_score": 1, "default_score": 0.5}
    if server == "engine":
        return {**judge, "backend": "engine",
                "backend_kwargs": {"path": folder, "max_new_tokens": JUDGE_TOKENS, "batch_size": 64}}, None
    python = str(ROOT / ".venv-vllm/bin/python") if server == "vllm" else sys.executable
    process, url = start_server(server, python, folder, work / f"{server}-server.log")
    return {**judge, "backend": "openai", "backend_kwargs": {
        "url": url, "model": folder, "max_tokens": JUDGE_TOKENS, "temperature": 0.0, "max_parallel": 8}}, process


def judge_labels(studio: StudioProcess, campaign: int, name: str, folder: str, server: str, work: Path) -> dict:
    kwargs, process = judge_kwargs(server, folder, work)
    try:
        start = time.perf_counter()
        studio.post(f"/api/campaigns/{campaign}/ai-labels",
                    {"overrides": ["reward.function=judge", f"reward.kwargs={json.dumps(kwargs)}"],
                     "name": name}, timeout=None)  # SmolLM2 as shipped: ~25 pairs a minute on one loaded core
        seconds = round(time.perf_counter() - start, 1)
    finally:
        if process is not None:
            process.terminate()
            process.wait(timeout=60)
    return {"folder": folder, "backend": server, "seconds": seconds,
            **studio.get(f"/api/campaigns/{campaign}/agreement?judge={name}")["overall"]}


def named_folder(text: str) -> tuple[str, str]:
    name, _, folder = text.partition("=")
    if not (name and folder):
        raise argparse.ArgumentTypeError(f"--judge wants NAME=FOLDER, got {text!r}")
    return name, folder


def reward_model_from_export(studio: StudioProcess, campaign: int, export: str, steps: int, runs_dir: Path,
                             work: Path) -> tuple[dict, dict]:
    """``recipes/smollm2_reward_model.yaml`` on the export: its held-out pair accuracy, and its in-sample
    agreement as an AI labeller of the same campaign."""
    rm_dir = runs_dir / "smollm2-rm-from-studio"
    seconds = run([sys.executable, "-m", "rlxf.cli", "train", "recipes/smollm2_reward_model.yaml",
                   f"data.path={export}", f"data.eval_path={HELD_OUT_PAIRS}", f"run_dir={rm_dir}",
                   f"preference.steps={steps}", f"checkpoint.every={steps}", "eval.every=10",
                   "logging.progress_bar=false"],
                  work / "reward_model.log")
    summary = json.loads((rm_dir / "summary.json").read_text())
    trained = {"train_seconds": seconds, "heldout_pairs": 58,
               "initial_eval": summary.get("initial_eval"), "final_eval": summary.get("final_eval")}
    checkpoint = sorted((rm_dir / "checkpoints").glob("step_*"))[-1] / "reward_model"
    studio.post(f"/api/campaigns/{campaign}/ai-labels", {"reward_model": str(checkpoint), "name": "reward_model"},
                timeout=None)
    agreement = studio.get(f"/api/campaigns/{campaign}/agreement?judge=reward_model")["overall"]
    shutil.rmtree(rm_dir / "checkpoints", ignore_errors=True)  # 1.6 GB; the figures are in the JSON
    return trained, agreement


def dpo_from_export(folder: str, export: str, steps: int, runs_dir: Path, work: Path) -> dict:
    """DPO on SmolLM2 (``recipes/dpo.yaml``, the real-model settings) on the export, and the policy's greedy
    accuracy on the recipe's held-out sums before and after."""
    dpo_dir = runs_dir / "smollm2-dpo-from-studio"
    seconds = run([sys.executable, "-m", "rlxf.cli", "train", "recipes/dpo.yaml", f"model.path={folder}",
                   "data.task=preference_file", "data.task_args={}", f"data.path={export}",
                   f"data.eval_path={HELD_OUT_PAIRS}", f"run_dir={dpo_dir}", "sft.steps=0",
                   f"preference.steps={steps}", f"checkpoint.every={steps}",
                   "logging.progress_bar=false", *DPO_OVERRIDES],
                  work / "dpo.log")
    summary = json.loads((dpo_dir / "summary.json").read_text())
    policy = sorted((dpo_dir / "checkpoints").glob("step_*"))[-1] / "policy"
    result = {"train_seconds": seconds, "initial_eval": summary.get("initial_eval"),
              "final_eval": summary.get("final_eval"), "held_out_100": held_out_comparison(folder, str(policy), work)}
    shutil.rmtree(dpo_dir / "checkpoints", ignore_errors=True)
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--prompts", type=int, default=400, help="train problems SmolLM2 answers twice")
    parser.add_argument("--rm-steps", type=int, default=30)
    parser.add_argument("--dpo-steps", type=int, default=30)
    parser.add_argument("--judge-server", choices=("engine", "transformers", "vllm", "none"), default="engine",
                        help="engine: the built-in engine in the studio (batched); transformers / vllm: a real "
                             "OpenAI-compatible server process (transformers serve decodes one request at a time "
                             "here: ~13 tokens/s)")
    parser.add_argument("--judge", type=named_folder, action="append",
                        help="NAME=FOLDER: a judge model folder (repeatable; default smollm2_judge=SmolLM2 as shipped)")
    parser.add_argument("--keep", type=Path, help="work folder to keep (default: a temporary one)")
    args = parser.parse_args()
    from playwright.sync_api import sync_playwright

    work = args.keep or Path(tempfile.mkdtemp(prefix="studio-smollm2-"))
    runs_dir = work / "runs"
    runs_dir.mkdir(parents=True, exist_ok=True)
    folder = resolve_model_path("smollm2:135m-instruct")
    prompts = work / "prompts.jsonl"
    rows = sums_in_words_splits().train[: args.prompts]
    prompts.write_text("".join(json.dumps({"prompt": r["prompt"], "answer": r["answer"]}) + "\n" for r in rows))
    result: dict = {"model": "SmolLM2-135M-Instruct (Q4_1 GGUF dequantized)", "prompts": args.prompts}
    studio = StudioProcess(runs_dir, log=work / "studio.log").start(timeout=120)
    try:
        start = time.perf_counter()
        made = studio.post("/api/campaigns/sample", {
            "name": "smollm2-sums", "checkpoint": folder, "prompts": str(prompts), "n": 2, "temperature": 0.7,
            "max_new_tokens": 40, "limit": args.prompts, "seed": 0}, timeout=None)
        result["sampling"] = {"pairs": made["pairs"], "seconds": round(time.perf_counter() - start, 1)}
        campaign = made["id"]
        verdicts: Counter = Counter()

        def labeller(prompt: str, left: str, right: str) -> str:
            verdict = careful_labeller(prompt, left, right)
            verdicts[verdict] += 1
            return verdict

        with sync_playwright() as playwright:
            browser = launch_chromium(playwright)
            page = browser.new_page()
            open_labelling(page, studio.url, campaign, "careful")
            start = time.perf_counter()
            labelled = label_by_keyboard(page, labeller, made["pairs"])
            seconds = time.perf_counter() - start
            browser.close()
        result["labelling"] = {"labelled": labelled, "verdicts": dict(verdicts), "seconds": round(seconds, 1),
                               "ms_per_label": round(1000 * seconds / max(labelled, 1), 1)}
        result["export"] = export = studio.post(f"/api/campaigns/{campaign}/export", {})
        studio.post(f"/api/campaigns/{campaign}/ai-labels", {"overrides": ["reward.function=math"], "name": "math"})
        result["agreement"] = {"math_verifier": studio.get(f"/api/campaigns/{campaign}/agreement?judge=math")["overall"]}
        judges = [] if args.judge_server == "none" else args.judge or [("smollm2_judge", folder)]
        for name, judge_folder in judges:
            result["agreement"][name] = judge_labels(studio, campaign, name, judge_folder, args.judge_server, work)
        if args.rm_steps:
            result["reward_model"], result["agreement"]["reward_model_in_sample"] = reward_model_from_export(
                studio, campaign, export["path"], args.rm_steps, runs_dir, work)
        if args.dpo_steps:
            result["dpo"] = dpo_from_export(folder, export["path"], args.dpo_steps, runs_dir, work)
    finally:
        studio.stop()
        if not args.keep:
            shutil.rmtree(work, ignore_errors=True)
    emit(result)


if __name__ == "__main__":
    sys.exit(main())
