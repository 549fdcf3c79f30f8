"""The campaigns page's *Sample pairs from a checkpoint* form sends its chat-template choice: headless Chromium
against a real ``rlxf studio`` process, the tiny checkpoint (whose tokenizer has a template). A missing Chromium
FAILS (``make setup``); RLXF_SKIP_BROWSER_TESTS=1 skips on purpose."""

from __future__ import annotations

import os

import pytest

from rlxf.studio.driver import StudioProcess
from tests.studio.helpers import write_jsonl

if os.environ.get("RLXF_SKIP_BROWSER_TESTS") == "1":
    pytest.skip("RLXF_SKIP_BROWSER_TESTS=1", allow_module_level=True)


def test_the_form_sends_auto_as_null_and_no_as_false(browser, tmp_path, tiny_model_dir):
    prompts = write_jsonl(tmp_path / "prompts.jsonl", [{"prompt": f"{a}+{a % 7}="} for a in range(10, 14)])
    server = StudioProcess(tmp_path / "runs").start()
    try:
        page = browser.new_page()
        page.goto(server.url + "/campaigns")
        page.wait_for_selector("#sample-form")  # drawn after the page has asked for the campaign list
        assert page.locator("#sample-form select[name=chat_template] option").all_text_contents() == [
            "auto (when the checkpoint has one)", "yes", "no (raw prompt)"]
        for name, choice in (("auto", "auto"), ("raw", "no")):
            page.fill("#sample-form input[name=name]", name)
            page.fill("#sample-form input[name=checkpoint]", tiny_model_dir)
            page.fill("#sample-form input[name=prompts]", str(prompts))
            page.fill("#sample-form input[name=n]", "4")
            page.select_option("#sample-form select[name=chat_template]", choice)
            page.click("#sample-form button[type=submit]")
            page.wait_for_selector(f"#campaigns td a:text-is('{name}')", timeout=60_000)  # the list redraws
        page.close()
        stored = {c["name"]: server.get(f"/api/campaigns/{c['id']}")["sampling"]["chat_template"]
                  for c in server.get("/api/campaigns")}
        assert stored == {"auto": True, "raw": False}
    finally:
        server.stop()
