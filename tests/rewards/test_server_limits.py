"""The reward server's guard rails, on a real uvicorn server on 127.0.0.1: limits, lengths, token,
timeouts, metrics, merging of concurrent requests, graceful shutdown, the OpenAPI schema."""

import os
import subprocess
import sys
import threading
import time

import pytest

from rlxf.rewards.base import as_reward
from rlxf.rewards.registry import build_reward
from rlxf.rewards.remote import RemoteReward, RemoteRewardError
from rlxf.rewards.server import ServerSettings, start_reward_server
from rlxf.rewards.server_guard import check_bind, is_loopback

httpx = pytest.importorskip("httpx")


def length_scores(prompts, responses, metadata):
    return [float(len(r)) for r in responses]


@pytest.fixture
def serve():
    servers = []

    def start(reward=length_scores, name="length", **settings):
        servers.append(start_reward_server(as_reward(reward), name, settings=ServerSettings(**settings)))
        return servers[-1]

    yield start
    for server in servers:
        server.stop()


def body(n, **extra):
    return {"prompts": ["p"] * n, "responses": ["x" * i for i in range(n)], **extra}


def test_body_and_batch_limits_answer_413(serve):
    url = serve(max_body_bytes=2000, max_batch=10).url
    assert httpx.post(f"{url}/score", json=body(10)).json()["scores"] == [float(i) for i in range(10)]
    reply = httpx.post(f"{url}/score", json=body(11))
    assert reply.status_code == 413 and "batch of 11 responses exceeds the server's limit of 10" in reply.json()["error"]
    big = {"prompts": ["p"], "responses": ["y" * 3000]}
    reply = httpx.post(f"{url}/score", json=big)
    assert reply.status_code == 413 and "limit of 2000 bytes" in reply.json()["error"]
    chunked = httpx.post(f"{url}/score", content=iter([b'{"prompts": ["p"], "responses": ["', b"z" * 2500, b'"]}']))
    assert chunked.status_code == 413  # no Content-Length: counted while reading


@pytest.mark.parametrize("payload, message", [
    ({"prompts": ["a", "b"], "responses": ["1"]}, "2 prompts for 1 responses"),
    ({"prompts": ["a"], "responses": ["1"], "metadata": [{}, {}]}, "2 metadata entries for 1 responses"),
    ({"prompts": ["a"]}, "responses: Field required"),
    ({"prompts": "a", "responses": ["1"]}, "prompts: Input should be a valid list"),
])
def test_malformed_requests_answer_400_naming_the_field(serve, payload, message):
    reply = httpx.post(f"{serve().url}/score", json=payload)
    assert reply.status_code == 400
    assert message in reply.json()["error"]


def test_non_json_body_is_a_400(serve):
    reply = httpx.post(f"{serve().url}/score", content=b"{not json", headers={"content-type": "application/json"})
    assert reply.status_code == 400 and reply.json()["error"].startswith("bad request")


def test_non_loopback_bind_needs_a_token():
    assert is_loopback("127.0.0.1") and is_loopback("::1") and is_loopback("localhost")
    assert not is_loopback("0.0.0.0") and not is_loopback("10.0.0.5") and not is_loopback("reward.example")
    with pytest.raises(ValueError, match=r"binding '0.0.0.0' \(not loopback\) needs a token; set the environment "
                                         r"variable RLXF_REWARD_TOKEN"):
        check_bind("0.0.0.0", None, "RLXF_REWARD_TOKEN")
    check_bind("0.0.0.0", "s3cret", "RLXF_REWARD_TOKEN")  # with one it may
    env = {k: v for k, v in os.environ.items() if k != "RLXF_REWARD_TOKEN"}
    cli = subprocess.run([sys.executable, "-m", "rlxf.cli", "serve-reward", "--host", "0.0.0.0", "--port", "0"],
                         capture_output=True, text=True, env=env, timeout=120)
    assert cli.returncode == 2 and "needs a token" in cli.stderr


def test_token_is_checked_and_sent_by_the_remote_reward(serve, monkeypatch):
    url = serve(token="s3cret").url
    assert httpx.post(f"{url}/score", json=body(2)).status_code == 401
    assert httpx.post(f"{url}/score", json=body(2), headers={"Authorization": "Bearer wrong"}).status_code == 401
    assert httpx.get(f"{url}/metrics").status_code == 401
    assert httpx.get(f"{url}/health").json() == {"ok": True, "reward": "length"}  # probes need no token
    monkeypatch.setenv("RLXF_TEST_TOKEN", "s3cret")
    assert RemoteReward(url, 10, token_env="RLXF_TEST_TOKEN").score(["p", "q"], ["ab", "c"], [{}, {}]).scores == [2.0, 1.0]
    with pytest.raises(RemoteRewardError, match="401"):
        RemoteReward(url, 10).score(["p"], ["ab"], [{}])
    monkeypatch.delenv("RLXF_TEST_TOKEN")
    with pytest.raises(ValueError, match="RLXF_TEST_TOKEN .* unset or empty"):
        RemoteReward(url, 10, token_env="RLXF_TEST_TOKEN")


def test_a_slow_reward_times_out_with_504_and_the_server_lives_on(serve):
    release = threading.Event()

    def slow(prompts, responses, metadata):
        if responses[0] == "slow":
            release.wait(30)  # held until the test has its 504
        return [1.0] * len(responses)

    url = serve(slow, "slow", timeout_seconds=0.3, workers=2, merge_requests=False).url
    try:
        reply = httpx.post(f"{url}/score", json={"prompts": ["p"], "responses": ["slow"]}, timeout=20)
        assert reply.status_code == 504 and "reward 'slow' did not finish within 0.3s" in reply.json()["error"]
        assert httpx.post(f"{url}/score", json={"prompts": ["p"], "responses": ["fast"]}).json()["scores"] == [1.0]
        metrics = httpx.get(f"{url}/metrics").json()
        assert metrics["requests"] == 2 and metrics["errors_by_status"] == {"504": 1} and metrics["samples_scored"] == 1
    finally:
        release.set()


def test_metrics_count_requests_errors_and_latency(serve):
    url = serve(max_batch=3).url
    for n in (1, 2, 3):
        assert httpx.post(f"{url}/score", json=body(n)).status_code == 200
    httpx.post(f"{url}/score", json=body(4))
    httpx.post(f"{url}/score", json={"prompts": []})
    m = httpx.get(f"{url}/metrics").json()
    assert (m["requests"], m["samples_scored"], m["errors"], m["errors_by_status"]) == (5, 6, 2, {"400": 1, "413": 1})
    assert m["latency_ms"]["window"] == 5 and 0 < m["latency_ms"]["p50"] <= m["latency_ms"]["p99"]
    assert m["rss_bytes"] > 10 * 2**20 and m["in_flight"] == 0


def wait_until(condition, seconds=30.0):
    deadline = time.monotonic() + seconds
    while not condition():
        assert time.monotonic() < deadline, "timed out waiting"
        time.sleep(0.01)


def test_concurrent_requests_are_merged_and_each_gets_its_own_scores(serve):
    calls, entered, release = [], threading.Event(), threading.Event()

    def recorded(prompts, responses, metadata):
        calls.append(len(responses))
        if len(calls) == 1:
            entered.set()
            release.wait(30)  # the first call holds the only worker while the others queue up
        return [float(len(r)) for r in responses]

    url = serve(recorded, "recorded", workers=1).url
    replies = {}

    def send(i):
        replies[i] = httpx.post(f"{url}/score", json={"prompts": ["p"] * 2, "responses": ["x" * i, "y" * (i + 1)]},
                                timeout=30).json()["scores"]

    threads = [threading.Thread(target=send, args=(i,)) for i in range(6)]
    threads[0].start()
    assert entered.wait(30)
    for t in threads[1:]:
        t.start()
    wait_until(lambda: httpx.get(f"{url}/metrics").json()["queued"] == 5)
    release.set()
    for t in threads:
        t.join()
    assert replies == {i: [float(i), float(i + 1)] for i in range(6)}
    assert calls == [2, 10]  # one call alone, then the five queued requests in one
    assert httpx.get(f"{url}/metrics").json()["reward_calls"] == 2


def test_a_merged_call_that_raises_fails_only_the_guilty_request(serve):
    def picky(prompts, responses, metadata):
        if "bad" in responses:
            raise ValueError("cannot score 'bad'")
        time.sleep(0.3)
        return [1.0] * len(responses)

    url = serve(picky, "picky", workers=1).url
    statuses = {}

    def send(name, response):
        statuses[name] = httpx.post(f"{url}/score", json={"prompts": ["p"], "responses": [response]}, timeout=10)

    threads = [threading.Thread(target=send, args=(f"r{i}", "bad" if i == 2 else "ok")) for i in range(4)]
    for t in threads:
        t.start()
        time.sleep(0.05)
    for t in threads:
        t.join()
    assert {k: v.status_code for k, v in statuses.items()} == {"r0": 200, "r1": 200, "r2": 500, "r3": 200}
    assert "reward 'picky' raised ValueError: cannot score 'bad'" in statuses["r2"].json()["error"]


def test_batch_dependent_rewards_are_never_merged(serve):
    reward = build_reward("mix", {"rewards": [{"function": "arithmetic"}], "normalize": "zscore"})
    server = serve(reward, "mix")
    assert server.server.config.app is not None  # started
    out = RemoteReward(server.url, 10).score(["a", "b"], ["1", "2"], [{"answer": "1"}, {"answer": "1"}])
    assert out.scores == pytest.approx([1.0, -1.0], abs=1e-4)


def test_stop_lets_in_flight_requests_finish():
    entered = threading.Event()

    def slow(prompts, responses, metadata):
        entered.set()
        time.sleep(0.5)
        return [3.0] * len(responses)

    server = start_reward_server(as_reward(slow), "slow")
    result = {}
    sender = threading.Thread(target=lambda: result.update(
        reply=httpx.post(f"{server.url}/score", json=body(2), timeout=30)))
    sender.start()
    assert entered.wait(30)  # the request is being scored: now stop
    server.stop()
    sender.join()
    assert result["reply"].status_code == 200 and result["reply"].json()["scores"] == [3.0, 3.0]
    with pytest.raises(httpx.ConnectError):
        httpx.get(f"{server.url}/health")


def test_openapi_schema_describes_the_score_request(serve):
    spec = httpx.get(f"{serve().url}/openapi.json").json()
    assert set(spec["paths"]) >= {"/score", "/health", "/metrics"}
    request = spec["components"]["schemas"]["ScoreRequest"]
    assert request["required"] == ["prompts", "responses"] and set(request["properties"]) == {
        "prompts", "responses", "metadata"}
    assert {"400", "413", "504"} <= set(spec["paths"]["/score"]["post"]["responses"])


def test_listening_socket_disables_nagle(serve):
    # Without TCP_NODELAY a kept-alive connection waits ~40 ms per reply (uvicorn writes the headers
    # and the body apart; the client delays its ACK): measured 45 ms -> 0.8 ms per request.
    import socket

    server = serve()
    assert server.sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY) != 0


def test_the_command_serves_and_stops_gracefully_on_sigterm():
    import signal

    server = subprocess.Popen([sys.executable, "-m", "rlxf.cli", "serve-reward", "--port", "0", "--max-batch", "2"],
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        line = server.stdout.readline()
        assert line.startswith("serving reward 'arithmetic' on http://127.0.0.1:"), line
        url = line.split()[4]
        reply = httpx.post(f"{url}/score", json={"prompts": ["1+1="], "responses": ["2"], "metadata": [{"answer": "2"}]})
        assert reply.json()["scores"] == [1.1]
        assert httpx.post(f"{url}/score", json=body(3)).status_code == 413  # --max-batch reached the server
        server.send_signal(signal.SIGTERM)
        server.wait(timeout=30)
    finally:
        if server.poll() is None:
            server.kill()
    assert server.returncode in (0, -signal.SIGTERM)  # uvicorn re-raises the signal after its clean stop
    assert "Traceback" not in server.stderr.read()


def test_a_missing_serve_extra_is_named(monkeypatch):
    from rlxf.rewards.server import build_app

    monkeypatch.setitem(sys.modules, "uvicorn", None)  # as if not installed
    with pytest.raises(ImportError, match=r"needs FastAPI and uvicorn \(uvicorn is missing\): pip install 'rlxf\[serve\]'"):
        build_app(as_reward(length_scores), "length")


def test_a_batch_past_the_limit_is_split_on_the_client_by_parallel(serve):
    from rlxf.rewards.parallel import ParallelReward

    url = serve(max_batch=4).url
    prompts, responses = ["p"] * 10, ["x" * i for i in range(10)]
    with pytest.raises(RemoteRewardError, match="413.*split it on the client"):
        RemoteReward(url, 10).score(prompts, responses, [{}] * 10)
    split = ParallelReward({"function": "remote", "kwargs": {"url": url, "timeout_seconds": 10}},
                           executor="thread", workers=2, chunk_size=4)
    try:
        assert split.score(prompts, responses, [{}] * 10).scores == [float(i) for i in range(10)]
    finally:
        split.close()
