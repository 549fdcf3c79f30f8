"""Screenshots of the studio's labelling page on real model text (docs/studio.md, "Real model text").

Imports tests/studio/data/smollm2_pairs.jsonl (10 pairs SmolLM2-135M-Instruct wrote through its chat template)
into a throwaway ``rlxf studio`` process, opens the pair whose prompt starts with ``--prompt`` (a code-block
answer by default) in headless Chromium at 1280x800 and at 700x900, saves what the viewport shows, and
prints the page geometry tests/studio/test_browser_real_text.py asserts (rlxf.studio.driver.labelling_layout).

    PYTHONPATH=src python benchmarks/studio_real_text_screenshots.py --out docs/images   # ~5 s
"""

from __future__ import annotations

import argparse
import json
import shutil
import tempfile
from pathlib import Path

from rlxf.studio.driver import StudioProcess, labelling_layout, launch_chromium, open_labelling, shown_pair

ROOT = Path(__file__).resolve().parents[1]
PAIRS = ROOT / "tests" / "studio" / "data" / "smollm2_pairs.jsonl"
SHOTS = {"studio_real_label.png": (1280, 800), "studio_real_label_narrow.png": (700, 900)}


def campaign_jsonl(first_prompt: str) -> str:
    """The fixture as ``{prompt, responses}`` rows, the chosen pair first (pairs are handed out in file order)."""
    rows = [json.loads(line) for line in PAIRS.read_text().splitlines()]
    rows.sort(key=lambda r: not r["prompt"].startswith(first_prompt))
    if not rows[0]["prompt"].startswith(first_prompt):
        raise SystemExit(f"no pair in {PAIRS} has a prompt starting with {first_prompt!r}")
    return "".join(json.dumps({"prompt": r["prompt"], "responses": [r["first"], r["second"]]}) + "\n" for r in rows)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=Path("docs/images"), help="folder for the two PNGs")
    parser.add_argument("--prompt", default="Write a Python function", help="start of the prompt of the pair to show")
    args = parser.parse_args()
    from playwright.sync_api import sync_playwright

    args.out.mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix="studio-real-"))
    studio = StudioProcess(work / "runs").start()
    report = {}
    try:
        made = studio.post("/api/campaigns/import", {"name": "SmolLM2-135M-Instruct samples",
                                                     "jsonl": campaign_jsonl(args.prompt)})
        with sync_playwright() as playwright:
            browser = launch_chromium(playwright, show_scrollbars=True)  # a code box that scrolls shows its bar
            for name, (width, height) in SHOTS.items():
                page = browser.new_page(viewport={"width": width, "height": height})
                open_labelling(page, studio.url, made["id"], "ann")  # the pair ann holds, in the same order again
                assert shown_pair(page)["prompt"].startswith(args.prompt)
                page.screenshot(path=str(args.out / name))
                report[name] = labelling_layout(page)
                page.close()
            browser.close()
    finally:
        studio.stop()
        shutil.rmtree(work, ignore_errors=True)
    print(json.dumps(report, indent=1))


if __name__ == "__main__":
    main()
