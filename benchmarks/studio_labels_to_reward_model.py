"""From browser labels to a reward model, end to end, and the judge's agreement with those labels.

1. ``rlxf studio`` serves a campaign imported from ``arithmetic_preferences`` train pairs (true sum vs the
   sloppy teacher's no-carry sum, or an off-by-one answer); which one was "chosen" is not shown.
2. Headless Chromium labels every pair by keyboard, the way a person would: it reads the prompt and the
   two responses off the page and presses A or B for the true sum.
3. Two AI labellers judge the same pairs through the studio: the ``judge`` reward with a carry-blind
   judge (``carry_blind_judge`` below: it checks sums digit by digit and forgets carries, the sloppy
   teacher's own mistake) and, after training, the reward model itself.
4. The campaign is exported and ``loop: reward_model`` (recipes/reward_model.yaml) trains on the export;
   held-out pair accuracy is measured on the task's own 200 held-out pairs, which nobody labelled.

Prints one JSON object (labelling rate, export counts, held-out accuracy, agreement of each AI labeller).
``--screenshots DIR`` also saves a PNG of every studio page (the README's pictures); ``--extra-run`` copies
finished runs in, for the run pages.

    PYTHONPATH=src python benchmarks/studio_labels_to_reward_model.py --pairs 800 --screenshots docs/images
"""

from __future__ import annotations

import argparse
import json
import os
import random
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from rlxf.data.arithmetic import add_without_carry
from rlxf.data.preferences import arithmetic_preferences
from rlxf.studio.driver import StudioProcess, label_by_keyboard, launch_chromium, open_labelling
from rlxf.studio.train_action import train_command

TASK_ARGS = {"digits": 3, "b_digits": 1, "ops": "+", "sloppy_teacher": 0.7}


def carry_blind_judge(prompts: list[str]) -> list[str]:
    """A judge backend that grades a sum digit by digit without carrying: it scores 10 for the no-carry sum."""
    replies = []
    for text in prompts:
        prompt = text.split("Prompt:\n", 1)[1].split("\n\nResponse:\n", 1)[0]
        response = text.split("\n\nResponse:\n", 1)[1].split("\n\n", 1)[0].strip()
        a, b = (int(x) for x in re.findall(r"\d+", prompt)[:2])
        replies.append(f"Added digit by digit. Score: {10 if response == str(add_without_carry(a, b)) else 0}")
    return replies


def truth_labeller(prompt: str, left: str, right: str) -> str:
    a, b = (int(x) for x in re.findall(r"\d+", prompt)[:2])
    truth = str(a + b)
    return "A" if left.strip() == truth else "B" if right.strip() == truth else "both_bad"


def screenshot_pages(browser, studio: StudioProcess, campaign_id: int, runs: list[str], out: Path) -> list[str]:
    out.mkdir(parents=True, exist_ok=True)
    page = browser.new_page(viewport={"width": 1360, "height": 1250})
    shots = []

    def shoot(name: str, url: str, ready: str, full: bool = False) -> None:
        page.goto(studio.url + url)
        page.wait_for_selector(ready)
        page.wait_for_timeout(300)
        page.screenshot(path=str(out / name), full_page=full)
        shots.append(str(out / name))

    shoot("studio_runs.png", "/", "#runs")
    if runs:
        shoot("studio_run.png", f"/run?name={runs[0]}", "#sample-count")
    if len(runs) > 1:
        shoot("studio_compare.png", f"/compare?a={runs[0]}&b={runs[1]}", "#curves .chart svg", full=True)
    sampled = [c for c in studio.get("/api/campaigns") if c["checkpoint"]]
    if sampled:
        page.goto(f"{studio.url}/label?campaign={sampled[0]['id']}")
        page.fill("#labeller-name", "ann")
        page.keyboard.press("Enter")
        label_by_keyboard(page, truth_labeller, 3)
        page.fill("#reason", "the carry from the units was dropped")
        page.screenshot(path=str(out / "studio_label.png"))
        shots.append(str(out / "studio_label.png"))
    shoot("studio_campaigns.png", "/campaigns", "#campaigns")
    shoot("studio_agreement.png", f"/agreement?campaign={campaign_id}&judge=judge", "#disagreements")
    page.close()
    return shots


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pairs", type=int, default=800, help="train pairs to label through the browser")
    parser.add_argument("--steps", type=int, default=500, help="reward-model steps (the recipe's 500)")
    parser.add_argument("--screenshots", type=Path, help="folder for a PNG of every page")
    parser.add_argument("--extra-run", action="append", default=[], help="a run directory to show on the run pages")
    parser.add_argument("--keep", type=Path, help="work folder to keep (default: a temporary one)")
    args = parser.parse_args()
    from playwright.sync_api import sync_playwright

    work = args.keep or Path(tempfile.mkdtemp(prefix="studio-rm-"))
    runs_dir = work / "runs"
    runs_dir.mkdir(parents=True, exist_ok=True)
    for extra in args.extra_run:
        shutil.copytree(extra, runs_dir / Path(extra).name, dirs_exist_ok=True,
                        ignore=shutil.ignore_patterns("checkpoints", "tensorboard", "wandb", "mlflow.db"))
    splits = arithmetic_preferences(seed=0, eval_size=200, **TASK_ARGS)
    heldout = work / "heldout.jsonl"
    heldout.write_text("".join(json.dumps(r) + "\n" for r in splits.eval))
    os.environ["PYTHONPATH"] = os.pathsep.join([str(Path(__file__).resolve().parent), os.environ.get("PYTHONPATH", "")])
    studio = StudioProcess(runs_dir).start()
    result: dict = {"pairs": args.pairs}
    try:
        rows = random.Random(0).sample(splits.train, args.pairs)  # the split is in problem order: draw across it
        made = studio.post("/api/campaigns/import", {"name": "arithmetic-truth", "source": "arithmetic_preferences",
                                                     "jsonl": "".join(json.dumps(r) + "\n" for r in rows)})
        with sync_playwright() as playwright:
            browser = launch_chromium(playwright)
            page = browser.new_page()
            open_labelling(page, studio.url, made["id"], "script")
            start = time.perf_counter()
            labelled = label_by_keyboard(page, truth_labeller, args.pairs)
            seconds = time.perf_counter() - start
            page.close()
            result["labelling"] = {"labelled": labelled, "seconds": round(seconds, 1),
                                   "ms_per_label": round(1000 * seconds / max(labelled, 1), 1)}
            result["export"] = studio.post(f"/api/campaigns/{made['id']}/export", {})
            studio.post(f"/api/campaigns/{made['id']}/ai-labels",
                        {"overrides": ["reward.function=judge",
                                       "reward.kwargs={backend: studio_labels_to_reward_model:carry_blind_judge}"]})
            result["judge_agreement"] = studio.get(f"/api/campaigns/{made['id']}/agreement?judge=judge")["overall"]
            run_dir = runs_dir / "reward-model-from-browser-labels"
            command = train_command("reward_model", result["export"]["path"], run_dir,
                                    [f"data.eval_path={heldout}", f"preference.steps={args.steps}"])
            start = time.perf_counter()
            subprocess.run(command, check=True, stdout=subprocess.DEVNULL)
            summary = json.loads((run_dir / "summary.json").read_text())
            result["reward_model"] = {"train_seconds": round(time.perf_counter() - start, 1),
                                      "heldout_pairs": len(splits.eval),
                                      "initial_eval": summary.get("initial_eval"), "final_eval": summary.get("final_eval")}
            checkpoint = sorted((run_dir / "checkpoints").glob("step_*"))[-1] / "reward_model"
            studio.post(f"/api/campaigns/{made['id']}/ai-labels", {"reward_model": str(checkpoint), "name": "reward_model"})
            result["reward_model_agreement"] = studio.get(
                f"/api/campaigns/{made['id']}/agreement?judge=reward_model")["overall"]
            if args.screenshots and args.extra_run:  # a campaign sampled from the first run's last checkpoint
                policy = sorted(Path(args.extra_run[0]).glob("checkpoints/step_*"))[-1] / "policy"
                prompts = work / "prompts.jsonl"
                prompts.write_text("".join(json.dumps({"prompt": r["prompt"], "answer": r["answer"]}) + "\n"
                                           for r in splits.eval[:40]))
                result["sampled_campaign"] = studio.post("/api/campaigns/sample", {
                    "name": f"{Path(args.extra_run[0]).name} samples", "checkpoint": str(policy),
                    "prompts": str(prompts), "n": 4, "temperature": 1.0, "max_new_tokens": 6, "limit": 40,
                    "chat_template": False})  # the run trained on raw prompts (data.chat_template=false)
            if args.screenshots:
                runs = [Path(r).name for r in args.extra_run] + [run_dir.name]
                result["screenshots"] = screenshot_pages(browser, studio, made["id"], runs, args.screenshots)
            browser.close()
    finally:
        studio.stop()
        if not args.keep:
            shutil.rmtree(work, ignore_errors=True)
    print(json.dumps(result, indent=1))


if __name__ == "__main__":
    sys.exit(main())
