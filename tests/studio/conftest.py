"""The headless Chromium the studio's browser tests share (one per test module)."""

from __future__ import annotations

import pytest

from rlxf.studio.driver import chromium_path, launch_chromium


@pytest.fixture(scope="module")
def browser():
    assert chromium_path(), "no chromium on PATH: run `make setup` (apt-get install chromium), or RLXF_SKIP_BROWSER_TESTS=1"
    from playwright.sync_api import sync_playwright

    with sync_playwright() as playwright:
        browser = launch_chromium(playwright)
        yield browser
        browser.close()
