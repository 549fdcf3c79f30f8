"""The studio's HTTP surface through a real ASGI client: token on non-local binds, bounded bodies,
security headers, the run reader's filters, one error shape."""

from __future__ import annotations

import json
import os
import time

import pytest
from fastapi.testclient import TestClient

from rlxf.studio.app import StudioSettings, make_app
from rlxf.studio.limits import InputError
from rlxf.studio.runs import find_runs
from rlxf.studio.security import token_for_bind
from rlxf.tracking.samples import SampleLog
from tests.studio.helpers import pair_rows, pairs_jsonl

TOKEN = "t" * 24


def fake_run(folder, finished: bool, alarm_step: int | None = None, age_seconds: float = 0.0):
    """A run directory as a run writes it: metrics.jsonl rows, samples.jsonl via SampleLog, summary.json."""
    folder.mkdir(parents=True)
    rows = [{"step": s, "reward/mean": 0.1 * s, "eval/accuracy": 0.5 + 0.01 * s, "time/generation": 0.2,
             "time/train": 0.1, "time/step": 0.3, "monitor/alarm": int(s == alarm_step)} for s in range(1, 6)]
    (folder / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    log = SampleLog(folder / "samples.jsonl", max_mb=1)
    for step in (1, 3, 5):
        log.write([{"step": step, "group": g, "prompt": f"{g}+{step}=", "response": str(g + step), "reward": 0.25 * g,
                    "truncated": g == 3, "advantage": 0.0, "length": 2} for g in range(4)])
    if finished:
        (folder / "summary.json").write_text(json.dumps({"steps": 5}))
    old = time.time() - age_seconds
    os.utime(folder / "metrics.jsonl", (old, old))


@pytest.fixture
def runs_dir(tmp_path):
    fake_run(tmp_path / "runs" / "done", finished=True, alarm_step=3)
    fake_run(tmp_path / "runs" / "sweep" / "live", finished=False)
    fake_run(tmp_path / "runs" / "dead", finished=False, age_seconds=3600)
    (tmp_path / "runs" / "warming-up").mkdir()
    (tmp_path / "runs" / "warming-up" / "config.yaml").write_text("loop: reward_model\n")  # SFT, no step yet
    return tmp_path / "runs"


def client(runs_dir, token=None) -> TestClient:
    return TestClient(make_app(StudioSettings(runs_dir, runs_dir / "studio.sqlite", token)),
                      base_url="http://127.0.0.1:8765")


def test_run_list_status_and_detail(runs_dir):
    c = client(runs_dir)
    runs = {r["name"]: r for r in c.get("/api/runs").json()}
    assert {n: r["status"] for n, r in runs.items()} == {"done": "finished", "sweep/live": "running", "dead": "stopped",
                                                         "warming-up": "running"}
    assert runs["warming-up"]["steps"] == 0
    assert runs["done"]["alarms"] == [3] and runs["done"]["latest"]["reward/mean"] == pytest.approx(0.5)
    detail = c.get("/api/runs/detail", params={"name": "done", "since": 3}).json()
    assert [r["step"] for r in detail["rows"]] == [4, 5]  # only the rows a refreshing page has not seen
    assert detail["stage_seconds"] == pytest.approx({"generation": 0.2, "train": 0.1})
    assert detail["summary"] == {"steps": 5}


@pytest.mark.parametrize(("query", "total"), [
    ({}, 12), ({"step_min": 3}, 8), ({"step_min": 2, "step_max": 4}, 4), ({"reward_min": 0.5}, 6),
    ({"reward_min": 0.25, "reward_max": 0.5}, 6), ({"alarm": "true"}, 4), ({"truncated": "true"}, 3),
    ({"alarm": "true", "truncated": "true"}, 1),
])
def test_sample_filters(runs_dir, query, total):
    got = client(runs_dir).get("/api/runs/samples", params={"name": "done", **query}).json()
    assert got["total"] == total


def test_a_run_name_is_only_ever_one_that_was_listed(runs_dir):
    c = client(runs_dir)
    for name in ("../runs/done", "/etc", "done/../../x"):
        answer = c.get("/api/runs/detail", params={"name": name})
        assert answer.status_code == 400 and "no run named" in answer.json()["error"]
    assert set(find_runs(runs_dir)) == {"done", "dead", "sweep/live", "warming-up"}


def test_non_loopback_binds_need_a_token():
    assert token_for_bind("127.0.0.1", None) is None and token_for_bind("localhost", None) is None
    assert len(token_for_bind("0.0.0.0", None)) >= 24
    with pytest.raises(InputError, match="at least 16"):
        token_for_bind("0.0.0.0", "short")


def test_token_header_cookie_and_query(runs_dir):
    c = client(runs_dir, TOKEN)
    assert c.get("/api/runs").status_code == 401 and c.get("/").status_code == 401
    assert c.get("/api/runs", headers={"Authorization": "Bearer wrong-token-wrong"}).status_code == 401
    assert c.get("/api/runs", headers={"Authorization": f"Bearer {TOKEN}"}).status_code == 200
    first = c.get("/", params={"token": TOKEN})
    assert first.status_code == 200 and c.cookies.get("rlxf_studio_token") == TOKEN
    assert c.get("/api/runs").status_code == 200  # the cookie now


def test_requests_another_sites_page_could_send_are_refused(runs_dir):
    c = client(runs_dir)
    rebound = c.get("/api/runs", headers={"Host": "attacker.example:8765"})  # DNS rebinding
    assert rebound.status_code == 403 and "only loopback" in rebound.json()["error"]
    assert c.get("/api/runs", headers={"Host": "localhost:8765"}).status_code == 200
    form = c.post("/api/campaigns/import", content=b'{"name": "x", "jsonl": ""}', headers={"Content-Type": "text/plain"})
    assert form.status_code == 403 and "application/json" in form.json()["error"]  # no-preflight cross-site POST
    foreign = c.post("/api/campaigns/import", json={"name": "x"}, headers={"Origin": "http://attacker.example"})
    assert foreign.status_code == 403 and "another site" in foreign.json()["error"]
    own = c.post("/api/campaigns/import", json={"name": "x", "jsonl": pairs_jsonl(pair_rows()[:1])},
                 headers={"Origin": "http://127.0.0.1:8765"})
    assert own.json() == {"id": 1, "pairs": 1}


def test_security_headers_and_static_pages(runs_dir):
    page = client(runs_dir).get("/label")
    assert page.status_code == 200 and "<script src=\"/static/label.js\">" in page.text
    assert "script-src 'self'" in page.headers["content-security-policy"]
    assert page.headers["x-content-type-options"] == "nosniff"


def test_bodies_are_bounded_and_errors_name_the_culprit(runs_dir):
    c = client(runs_dir)
    big = c.post("/api/labels", content=b"{" + b" " * 20_000 + b"}", headers={"Content-Type": "application/json"})
    assert big.status_code == 413 and "limit is 16384" in big.json()["error"]
    made = c.post("/api/campaigns/import", json={"name": "adds", "jsonl": pairs_jsonl(pair_rows())}).json()
    assert made == {"id": 1, "pairs": 8}
    bad = c.post("/api/campaigns/import", json={"name": "b", "jsonl": '{"prompt": "x"}\n', "source": "mine.jsonl"})
    assert bad.status_code == 400 and bad.json()["error"].startswith("mine.jsonl:1:")
    forged = c.post("/api/labels", json={"token": "forged", "labeller": "ann", "verdict": "A"})
    assert forged.status_code == 409 and "not issued" in forged.json()["error"]
    shown = c.get("/api/campaigns/1/next", params={"labeller": "ann"}).json()["pair"]
    done = c.post("/api/labels", json={"token": shown["token"], "labeller": "ann", "verdict": "tie"}).json()
    assert done["label"]["verdict"] == "tie" and done["pair"]["position"] == 1 and done["progress"]["labels"] == 1
    undone = c.post("/api/campaigns/1/undo", json={"labeller": "ann"}).json()
    assert undone["pair"]["token"] == shown["token"] and undone["progress"]["labels"] == 0
    assert c.get("/api/campaigns/99").json() == {"error": "no campaign with id 99"}
