"""The labelling page on real LLM text, in headless Chromium against a real ``rlxf studio`` process.

tests/studio/data/smollm2_pairs.jsonl holds 10 pairs SmolLM2-135M-Instruct wrote through its chat template:
answers up to ~1,300 characters, markdown, fenced code with long lines, a markdown table, an HTML ``<script>``
tag. Two constructed rows join them (below). At 1280x800 and at 700x900 one labeller each labels every pair
by keyboard, having scrolled to the bottom of the pair first as a reader of a long answer does, and for every
pair the test measures (rlxf.studio.driver.labelling_layout):

* the page never scrolls sideways (documentElement.scrollWidth <= clientWidth);
* prose wraps inside its box (every text box's scrollWidth <= clientWidth, the 448-character URL included),
  and a fenced code block keeps its lines in a box no wider than the room it has, scrolling sideways inside
  it (overflow-x: auto): the choice made in studio.css;
* both responses get the same width, and the verdict buttons stay inside the viewport;
* after a key press the next pair starts at the top (scrollY 0).

Then: what the page shows is exactly what was imported; ``<script>`` and chat-template special tokens are
shown literally and nothing ran; the SQLite rows hold one label per pair and labeller with the right verdict.
A missing Chromium FAILS (``make setup``); RLXF_SKIP_BROWSER_TESTS=1 skips on purpose.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import sqlite3
from pathlib import Path

import pytest

from rlxf.studio.driver import (
    KEY_FOR,
    StudioProcess,
    labelling_layout,
    open_labelling,
    shown_pair,
    wait_for_pair,
)

if os.environ.get("RLXF_SKIP_BROWSER_TESTS") == "1":
    pytest.skip("RLXF_SKIP_BROWSER_TESTS=1", allow_module_level=True)

REAL_PAIRS = Path(__file__).parent / "data" / "smollm2_pairs.jsonl"
VIEWPORTS = {"wide": (1280, 800), "narrow": (700, 900)}


def long_url(seed: str) -> str:
    """A 448-character token with no break opportunity a browser would use (a URL of hash digits)."""
    return "https://example.com/dl/" + hashlib.sha256(seed.encode()).hexdigest() * 7


# Constructed, not sampled. SmolLM2 did not happen to write these in the fixture, but a chat model does when it
# runs past its end of turn: the template's special tokens inside a response, and markup it echoes from a prompt.
SPECIAL_TOKENS = {"prompt": "What is 47 plus 8?", "responses": [  # the first one ran out of tokens in a code block
    "55<|im_end|>\n<|im_start|>user\nAnd 48 plus 8?<|im_end|>\n<|im_start|>assistant\n56\n```python\nprint(48 + 8",
    "47 plus 8 is 55.<script>window.__studioRan = 1</script><|im_end|><|endoftext|>"]}
# Two unbroken tokens of the same length: the length-loving labeller below calls this pair a tie.
LONG_TOKEN = {"prompt": "Where can I download the weights?", "responses": [
    f"Here: {long_url('a')}\nCheck the hash after the download.", f"Here: {long_url('b')}\nCheck the hash after the download."]}


def campaign_rows() -> list[dict]:
    real = [json.loads(line) for line in REAL_PAIRS.read_text().splitlines()]
    return [{"prompt": r["prompt"], "responses": [r["first"], r["second"]]} for r in real] + [SPECIAL_TOKENS, LONG_TOKEN]


# A fenced block as CommonMark has it: a ``` line, then up to a bare ``` line, or to the end when never closed.
FENCED = re.compile(r"^ {0,3}```.*?(?:^ {0,3}```[ \t]*$\n?|\Z)", re.M | re.S)


def longer_is_better(left: str, right: str) -> str:
    """A labeller who prefers the longer answer (a verdict the test can recompute from the stored pair)."""
    return "A" if len(left) > len(right) else "B" if len(right) > len(left) else "tie"


@pytest.fixture(scope="module")
def studio(tmp_path_factory):
    server = StudioProcess(tmp_path_factory.mktemp("studio-real") / "runs").start()
    rows = campaign_rows()
    made = server.post("/api/campaigns/import", {"name": "smollm2", "overlap": 2,
                                                 "jsonl": "".join(json.dumps(r) + "\n" for r in rows)})
    assert made["pairs"] == len(rows) == 12
    yield server, made["id"]
    server.stop()


def check_layout(layout: dict, where: str) -> None:
    page, viewport = layout["page"], layout["viewport"]
    assert page["scroll_width"] <= page["client_width"] == viewport["width"], f"{where}: the page scrolls sideways"
    for text in layout["texts"]:  # prose wrapped: nothing sticks out of #prompt, #left, #right
        assert text["scroll_width"] <= text["client_width"], f"{where}: #{text['id']} {text}"
    for code in layout["code_boxes"]:  # a code block fits its room and scrolls inside itself
        assert code["width"] <= code["room"] + 0.5 and code["overflow_x"] == "auto", f"{where}: {code}"
    left, right = layout["responses"]
    assert abs(left["width"] - right["width"]) < 1, f"{where}: unequal columns {left['width']} vs {right['width']}"
    assert all(r["scroll_width"] <= r["client_width"] for r in layout["responses"]), where
    assert 0 <= layout["actions"]["top"] < layout["actions"]["bottom"] <= viewport["height"], f"{where}: buttons {layout}"


def label_everything(browser, url: str, campaign_id: int, labeller: str, viewport: tuple[int, int]) -> dict:
    """Label every pair by keyboard, scrolled to the bottom first; measure each pair before and after the scroll."""
    page = browser.new_page(viewport={"width": viewport[0], "height": viewport[1]})
    dialogs = []
    page.on("dialog", lambda dialog: (dialogs.append(dialog.message), dialog.dismiss()))
    open_labelling(page, url, campaign_id, labeller)
    seen = {"pairs": [], "tall": 0, "code_scrolls": 0, "top_after_key": [], "visible": {}, "code": []}
    while (pair := shown_pair(page)) is not None:
        where = f"{labeller} {viewport} {pair['prompt'][:40]!r}"
        layout = labelling_layout(page)
        check_layout(layout, where)
        seen["tall"] += any(r["height"] > viewport[1] for r in layout["responses"])
        seen["code_scrolls"] += sum(c["scroll_width"] > c["client_width"] for c in layout["code_boxes"])
        seen["visible"][pair["prompt"]] = page.locator("#left").inner_text() + page.locator("#right").inner_text()
        seen["pairs"].append(pair)
        seen["code"].append(page.eval_on_selector_all("#pair-box pre.code", "boxes => boxes.map(b => b.textContent)"))
        page.evaluate("window.scrollTo(0, document.documentElement.scrollHeight)")  # read to the end of the answers
        check_layout(labelling_layout(page), where + " scrolled")
        page.keyboard.press(KEY_FOR[longer_is_better(pair["left"], pair["right"])])
        wait_for_pair(page, pair["token"])
        seen["top_after_key"].append(labelling_layout(page)["viewport"]["scroll_y"])
    seen["ran"] = page.evaluate("[window.__studioRan, document.querySelectorAll('#page script').length]")
    seen["dialogs"] = dialogs
    page.close()
    return seen


@pytest.fixture(scope="module")
def labelled(browser, studio):
    server, campaign_id = studio
    return {name: label_everything(browser, server.url, campaign_id, name, size) for name, size in VIEWPORTS.items()}


def test_every_pair_fits_both_viewports_and_keys_work_below_the_fold(labelled):
    for name, seen in labelled.items():
        assert len(seen["pairs"]) == 12, name  # every pair, each one measured by check_layout
        assert seen["top_after_key"] == [0] * 12, name  # the next pair starts at its prompt, not mid-page
    # the hard cases were there (lower bounds: the counts depend on the system's monospace font): a response
    # taller than the viewport (the lists-and-tuples answer), code lines wider than a 700px page's columns
    assert labelled["wide"]["tall"] >= 1 and labelled["narrow"]["tall"] >= 1
    assert labelled["narrow"]["code_scrolls"] >= 4


def test_the_page_shows_exactly_the_imported_text_and_runs_none_of_it(labelled):
    responses = {r for row in campaign_rows() for r in row["responses"]}
    for name, seen in labelled.items():
        for pair, code in zip(seen["pairs"], seen["code"]):  # the boxes neither add nor drop a character
            assert pair["left"] in responses and pair["right"] in responses and pair["left"] != pair["right"], name
            assert code == [b for t in ("prompt", "left", "right") for b in FENCED.findall(pair[t])], name  # each block boxed
        assert sum(map(len, seen["code"])) == 15  # 14 closed blocks in the real answers, 1 never closed
        shown_html = next(p for p in seen["pairs"] if p["prompt"].startswith("Write a short HTML page"))
        assert '<script src="https://jite.com/jite.com/2.11.06.js">\n alert("Hello!");\n</script>' in \
            shown_html["left"] + shown_html["right"]
        visible = seen["visible"]["What is 47 plus 8?"]  # innerText: what is on screen, not just in the DOM
        assert "<|im_end|>\n<|im_start|>user\nAnd 48 plus 8?<|im_end|>\n<|im_start|>assistant\n56" in visible
        assert "<script>window.__studioRan = 1</script><|im_end|><|endoftext|>" in visible
        assert seen["ran"] == [None, 0] and seen["dialogs"] == [], name  # no script element made, none ran


def test_the_stored_labels_have_the_keyed_verdicts(studio, labelled):
    server, campaign_id = studio
    db = sqlite3.connect(server.runs_dir / "studio.sqlite")
    rows = db.execute("SELECT p.id, p.first, p.second, l.verdict, l.labeller, l.undone FROM labels l "
                      "JOIN pairs p ON p.id = l.pair_id WHERE l.campaign_id = ? ORDER BY l.id", (campaign_id,)).fetchall()
    assert len(rows) == 24 and not any(r[5] for r in rows)
    for labeller in VIEWPORTS:
        mine = [r for r in rows if r[4] == labeller]
        assert len(mine) == 12 and len({r[0] for r in mine}) == 12, labeller  # one label per pair, none twice
        expected = [{"A": "first", "B": "second", "tie": "tie"}[longer_is_better(r[1], r[2])] for r in mine]
        assert [r[3] for r in mine] == expected, labeller  # stored in the pair's own order, whatever was shown
        assert sorted(r[3] for r in mine).count("tie") == 1  # the two equal-length URLs
