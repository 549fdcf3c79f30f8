"""Driving a studio from a script: its server as a child process, a headless Chromium, labels by keyboard.

Used by the browser tests, the labels-to-reward-model benchmark and the screenshots. Chromium is the
system's (Debian's ``chromium``; Playwright only drives it, nothing is downloaded). A script labels a
pair the way a person does: it reads the prompt and both responses off the page, presses the key, and
waits until the page shows the next pair (which the server sends only after the label is committed).
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Callable
from pathlib import Path

CHROMIUM_CANDIDATES = ("chromium", "chromium-browser", "google-chrome")
KEY_FOR = {"A": "a", "B": "b", "tie": "t", "both_bad": "x", "skip": "s"}


def chromium_path() -> str | None:
    found = (shutil.which(name) for name in CHROMIUM_CANDIDATES)
    return next((p for p in found if p), None)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class StudioProcess:
    """``rlxf studio RUNS_DIR`` in a child process on a loopback port; ``kill()`` is SIGKILL (no clean-up)."""

    def __init__(self, runs_dir: str | Path, port: int | None = None, log: Path | None = None) -> None:
        self.runs_dir, self.port = Path(runs_dir), port or free_port()
        self.log = log or self.runs_dir / "studio.log"
        self.process: subprocess.Popen | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self, timeout: float = 60.0) -> StudioProcess:
        self.runs_dir.mkdir(parents=True, exist_ok=True)
        with open(self.log, "a") as out:
            self.process = subprocess.Popen(
                [sys.executable, "-m", "rlxf.cli", "studio", str(self.runs_dir), "--port", str(self.port)],
                stdout=out, stderr=subprocess.STDOUT, env={**os.environ, "PYTHONUNBUFFERED": "1"})
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise RuntimeError(f"rlxf studio exited with {self.process.returncode}: {self.log.read_text()[-2000:]}")
            try:
                urllib.request.urlopen(f"{self.url}/api/campaigns", timeout=1).read()
                return self
            except OSError:
                time.sleep(0.1)
        self.stop()
        raise RuntimeError(f"rlxf studio did not answer on {self.url} within {timeout} s")

    def kill(self) -> None:
        if self.process and self.process.poll() is None:
            self.process.send_signal(signal.SIGKILL)
            self.process.wait()

    def stop(self) -> None:
        if self.process and self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(10)
            except subprocess.TimeoutExpired:
                self.kill()

    def post(self, path: str, body: dict, timeout: float | None = 600) -> dict:
        """``timeout`` None waits as long as the studio works (sampling or judging thousands of pairs with a
        real model takes longer than any fixed limit)."""
        request = urllib.request.Request(self.url + path, json.dumps(body).encode(),
                                         {"Content-Type": "application/json"}, method="POST")
        with urllib.request.urlopen(request, timeout=timeout) as reply:
            return json.loads(reply.read())

    def get(self, path: str) -> dict | list:
        with urllib.request.urlopen(self.url + path, timeout=60) as reply:
            return json.loads(reply.read())


def launch_chromium(playwright, show_scrollbars: bool = False):
    """Headless Chromium from the system (``--no-sandbox``: the tests may run as root in a container).
    Headless hides scrollbars; ``show_scrollbars`` keeps them, so a screenshot shows what scrolls."""
    path = chromium_path()
    if path is None:
        raise RuntimeError("no chromium on PATH: `make setup` installs it (apt-get install chromium)")
    return playwright.chromium.launch(executable_path=path, headless=True, args=["--no-sandbox"],
                                      ignore_default_args=["--hide-scrollbars"] if show_scrollbars else None)


SHOWN_PAIR = """token => { const box = document.getElementById('pair-box');
  return document.getElementById('done') !== null || (box !== null && box.dataset.token && box.dataset.token !== token); }"""


def wait_for_pair(page, previous_token: str = "") -> None:
    """Until the page shows a pair other than ``previous_token`` (or says there is none left)."""
    page.wait_for_function(SHOWN_PAIR, arg=previous_token, timeout=30_000)


def shown_pair(page) -> dict | None:
    """The pair on screen (prompt, left, right, token), or None when the campaign is done for this labeller."""
    if page.locator("#done").count():
        return None
    return {"token": page.locator("#pair-box").get_attribute("data-token"),
            "prompt": page.locator("#prompt").text_content(), "left": page.locator("#left").text_content(),
            "right": page.locator("#right").text_content()}


def label_by_keyboard(page, decide: Callable[[str, str, str], str], count: int) -> int:
    """Label up to ``count`` pairs with ``decide(prompt, left, right) -> A|B|tie|both_bad|skip``, by key
    presses; returns how many were labelled."""
    done = 0
    wait_for_pair(page)
    while done < count and (pair := shown_pair(page)) is not None:
        page.keyboard.press(KEY_FOR[decide(pair["prompt"], pair["left"], pair["right"])])
        wait_for_pair(page, pair["token"])
        done += 1
    return done


def open_labelling(page, base_url: str, campaign_id: int, labeller: str) -> None:
    """Open the campaign's labelling page and sign in as ``labeller`` (typed into the name form)."""
    page.goto(f"{base_url}/label?campaign={campaign_id}")
    page.fill("#labeller-name", labeller)
    page.keyboard.press("Enter")
    wait_for_pair(page)


LABELLING_LAYOUT = """() => {
  const root = document.documentElement, rect = n => n.getBoundingClientRect();
  const all = selector => [...document.querySelectorAll(selector)];
  const actions = document.querySelector('#page > .actions');
  return {
    viewport: {width: innerWidth, height: innerHeight, scroll_y: scrollY},
    page: {scroll_width: root.scrollWidth, client_width: root.clientWidth},
    responses: all('#pair-box .response').map(n => ({width: rect(n).width, height: rect(n).height,
                                                      scroll_width: n.scrollWidth, client_width: n.clientWidth})),
    texts: all('#pair-box .text').map(n => ({id: n.id, scroll_width: n.scrollWidth, client_width: n.clientWidth})),
    code_boxes: all('#pair-box pre.code').map(n => ({width: rect(n).width, room: n.parentElement.clientWidth,
      scroll_width: n.scrollWidth, client_width: n.clientWidth, overflow_x: getComputedStyle(n).overflowX})),
    actions: actions ? {top: rect(actions).top, bottom: rect(actions).bottom} : null,
  };
}"""


def labelling_layout(page) -> dict:
    """Where the labelling page's parts sit, in CSS pixels: the page's and every text box's scroll and client
    widths, each response's size, each fenced code box's width against the room it has, the verdict buttons'
    top and bottom in the viewport. What the real-text browser test asserts and the screenshot script prints."""
    return page.evaluate(LABELLING_LAYOUT)
