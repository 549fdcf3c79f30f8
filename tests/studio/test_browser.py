"""End to end in a real browser: Debian's Chromium, headless, driven by Playwright, against a real
``rlxf studio`` server process. A missing Chromium FAILS these tests (``make setup`` installs it); set
RLXF_SKIP_BROWSER_TESTS=1 to skip them on purpose. The browser is tests/studio/conftest.py's."""

from __future__ import annotations

import json
import os
import sqlite3

import pytest

from rlxf.data.preferences import read_preference_rows
from rlxf.studio.driver import StudioProcess, label_by_keyboard, open_labelling
from rlxf.tracking.samples import SampleLog
from tests.conftest import small_overrides
from tests.studio.helpers import arithmetic_verdict, pairs_jsonl, true_sum

if os.environ.get("RLXF_SKIP_BROWSER_TESTS") == "1":
    pytest.skip("RLXF_SKIP_BROWSER_TESTS=1", allow_module_level=True)

XSS = '<script>window.__pwned = 1</script><img src=x onerror="window.__pwned = 2">'


def wait_for_text(page, selector: str, prefix: str, timeout: float = 30_000) -> None:
    """Until the first element matching ``selector`` exists and its text starts with ``prefix``."""
    page.wait_for_function("([sel, prefix]) => { const n = document.querySelector(sel); "
                           "return n !== null && n.textContent.startsWith(prefix); }", arg=[selector, prefix],
                           timeout=timeout)


@pytest.fixture(scope="module")
def runs_dir(tmp_path_factory, tiny_model_dir):
    """A finished tiny GRPO run (3 steps, rollouts logged every step) and a run whose logged rollouts are hostile."""
    from rlxf.checked_config import load_config
    from rlxf.loops import get_loop

    runs = tmp_path_factory.mktemp("studio") / "runs"
    config = load_config(None, [*small_overrides(runs / "tiny-grpo", tiny_model_dir), "logging.samples_every=1",
                                "logging.samples_per_step=4", "logging.plot=false"])
    get_loop(config.loop)(config, write=lambda _: None)
    hostile = runs / "hostile"
    hostile.mkdir()
    (hostile / "metrics.jsonl").write_text('{"step": 1, "reward/mean": 0.5}\n')
    SampleLog(hostile / "samples.jsonl", max_mb=1).write([{"step": 1, "prompt": XSS, "response": XSS, "reward": 1.0}])
    return runs


@pytest.fixture
def studio(runs_dir):
    server = StudioProcess(runs_dir).start()
    yield server
    server.stop()


def test_run_page_shows_the_finished_runs_curves_and_samples(browser, studio):
    page = browser.new_page()
    page.goto(studio.url + "/")
    page.wait_for_selector("#runs a")
    assert page.locator("#runs a", has_text="tiny-grpo").count() == 1
    page.click("text=tiny-grpo")
    page.wait_for_selector("#sample-count")
    assert page.locator("#status").text_content() == "finished"
    summary = json.loads((studio.runs_dir / "tiny-grpo" / "summary.json").read_text())
    assert page.locator("#footprint").text_content() == f" · {summary['disk_bytes'] / 1e6:.1f} MB on disk"
    drawn = page.locator(".chart svg path").count()
    assert drawn >= 5  # reward, its components, KL, entropy, length, loss: one line each at least
    assert page.locator(".chart h3", has_text="Where a step's time goes").count() == 1
    assert page.locator("#sample-count").text_content().startswith("12 logged responses")  # 3 steps x 4
    page.fill("input[name=step_min]", "3")
    page.click("#sample-filters button")
    wait_for_text(page, "#sample-count", "4 ")
    page.close()


def test_a_training_runs_curves_refresh_by_themselves(browser, studio, runs_dir):
    live = runs_dir / "live"
    live.mkdir(exist_ok=True)
    (live / "metrics.jsonl").write_text('{"step": 1, "reward/mean": 0.1}\n')  # written just now: running
    page = browser.new_page()
    page.goto(studio.url + "/run?name=live")
    page.wait_for_selector("#status")
    assert page.locator("#status").text_content() == "running"
    assert page.locator("main p.muted").first.text_content().startswith("1 steps logged")
    with (live / "metrics.jsonl").open("a") as out:
        out.write('{"step": 2, "reward/mean": 0.4}\n')
    wait_for_text(page, "main p.muted", "2 steps logged", timeout=15_000)  # the page asks every 2 s
    page.close()


def test_logged_model_output_is_shown_as_text(browser, studio):
    page = browser.new_page()
    page.goto(studio.url + "/run?name=hostile")
    page.wait_for_selector("pre.response-text")
    assert page.locator("pre.response-text").text_content() == XSS
    assert page.evaluate("window.__pwned") is None and page.locator("main img").count() == 0
    page.close()


def pairs_with_a_hostile_one(n: int) -> list[dict]:
    rows = [{"prompt": f"{a}+{a % 10}=", "answer": str(a + a % 10), "chosen": str(a + a % 10),
             "rejected": str(a + a % 10 - 10)} for a in range(13, 13 + n)]
    rows[4]["rejected"] = XSS
    return rows


def test_label_twenty_pairs_by_keyboard_across_a_killed_server(browser, runs_dir):
    server = StudioProcess(runs_dir).start()
    try:
        made = server.post("/api/campaigns/import", {"name": "adds", "jsonl": pairs_jsonl(pairs_with_a_hostile_one(24))})
        page = browser.new_page()
        open_labelling(page, server.url, made["id"], "ann")
        seen_hostile = []

        def decide(prompt, left, right):
            if XSS in (left, right):
                seen_hostile.append(page.evaluate("window.__pwned") is None and page.locator("#pair-box img").count() == 0)
            return arithmetic_verdict(prompt, left, right)

        assert label_by_keyboard(page, decide, 10) == 10
        page.keyboard.press("u")  # undo the 10th label: its pair comes back
        wait_for_text(page, "#progress", "9 of 24")
        assert label_by_keyboard(page, decide, 1) == 1
        server.kill()  # SIGKILL mid-campaign: nothing may be lost or duplicated
        server.start()
        page.reload()
        wait_for_text(page, "#progress", "10 of 24")
        assert label_by_keyboard(page, decide, 10) == 10
        assert page.locator("#progress").text_content().startswith("20 of 24 labels")
        assert seen_hostile == [True]
        exported = server.post(f"/api/campaigns/{made['id']}/export", {})
        judged = server.post(f"/api/campaigns/{made['id']}/ai-labels", {"overrides": [
            "reward.function=judge", "reward.kwargs={backend: tests.studio.helpers:arithmetic_judge}"]})
        assert judged == {"judge": "judge", "pairs": 24}
        page.goto(f"{server.url}/agreement?campaign={made['id']}")
        page.wait_for_selector("#disagreements")
        # the judge knows the true sums as well as the labeller did: 20 of 20 agree, kappa 1
        assert [page.locator(f"#agree-{k}").text_content() for k in ("n", "accuracy", "kappa")] == ["20", "1", "1"]
        assert page.locator("#per-labeller td").first.text_content() == "ann"
        assert page.locator("#disagreements tr").count() == 1  # the header only
        # nothing between the list's heading and its table (a null child once showed as the text "null")
        assert page.evaluate("document.querySelector('#disagreements').previousSibling.tagName") == "H2"
        page.close()
    finally:
        server.stop()

    db = sqlite3.connect(runs_dir / "studio.sqlite")
    rows = db.execute("SELECT p.prompt, p.first, p.second, l.verdict, l.swapped, l.labeller, l.undone FROM labels l "
                      "JOIN pairs p ON p.id = l.pair_id WHERE l.campaign_id = ? ORDER BY l.id", (made["id"],)).fetchall()
    active = [r for r in rows if not r[6]]
    assert len(rows) == 21 and len(active) == 20 and len({r[0] for r in active}) == 20  # one undone, no duplicate
    assert all(int({"first": r[1], "second": r[2]}[r[3]]) == true_sum(r[0]) for r in active)  # every verdict right
    assert {r[3] for r in active} == {"first", "second"}
    assert {r[4] for r in active} == {0, 1} and {r[5] for r in rows} == {"ann"}  # shown order varied, recorded
    assert exported["exported"] == 20 and exported["unlabelled"] == 4
    prefs = read_preference_rows(exported["path"])
    assert all(int(r["chosen"]) == true_sum(r["prompt"]) for r in prefs)
