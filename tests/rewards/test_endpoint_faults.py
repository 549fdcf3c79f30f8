"""The remote reward server and a judge endpoint, slow, refusing, failing or answering garbage: bounded
retries with backoff, then one error naming the endpoint and every try; nothing hangs. A real HTTP
server on 127.0.0.1 plays each fault from a script, one behaviour per request."""

import json
import socket
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from rlxf.rewards.http_client import EndpointError, RetryPolicy
from rlxf.rewards.judge import JudgeReward
from rlxf.rewards.remote import RemoteReward, RemoteRewardError
from rlxf.roles.reward import RewardError, RewardRole

SCORES = {"scores": [1.0, 0.5]}
CHAT = {"choices": [{"message": {"content": "fine. Score: 8"}}]}


class ScriptedHandler(BaseHTTPRequestHandler):
    """Plays ``server.script`` in order (the last entry repeats): ok, 500, 400, garbage, slow, hangup."""

    def do_POST(self):  # noqa: N802  (http.server's name)
        self.rfile.read(int(self.headers["Content-Length"]))
        server = self.server
        with server.lock:
            behaviour = server.script[min(server.calls, len(server.script) - 1)]
            server.calls += 1
        if behaviour == "hangup":
            self.close_connection = True
            self.connection.shutdown(socket.SHUT_RDWR)
            return
        if behaviour == "slow":
            time.sleep(1.5)
        code, data = {"500": (500, b"overloaded"), "400": (400, b"bad request"),
                      "garbage": (200, b"<html>proxy error</html>")}.get(behaviour, (200, server.ok_body))
        self.send_response(code)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, *args):
        pass


@pytest.fixture
def endpoint():
    servers = []

    def start(script: list[str], ok_body: dict = SCORES) -> tuple[str, ThreadingHTTPServer]:
        server = ThreadingHTTPServer(("127.0.0.1", 0), ScriptedHandler)
        server.daemon_threads = True
        server.script, server.calls, server.lock = script, 0, threading.Lock()
        server.ok_body = json.dumps(ok_body).encode()
        threading.Thread(target=server.serve_forever, daemon=True).start()
        servers.append(server)
        return f"http://127.0.0.1:{server.server_address[1]}", server

    yield start
    for server in servers:
        server.shutdown()
        server.server_close()


def remote(url: str, timeout: float = 5.0) -> RemoteReward:
    return RemoteReward(url, timeout_seconds=timeout, attempts=3, backoff_seconds=0.1)


def score(reward) -> list[float]:
    return reward.score(["p", "q"], ["a", "b"], [{}, {}]).scores


@pytest.mark.parametrize("fault", ["500", "garbage", "hangup"])
def test_a_transient_fault_is_retried_with_backoff(endpoint, fault, monkeypatch):
    from rlxf.rewards import http_client

    waits = []
    real_sleep = time.sleep
    monkeypatch.setattr(http_client.time, "sleep", lambda s: (waits.append(s), real_sleep(s)))
    url, server = endpoint([fault, fault, "ok"])
    assert score(remote(url)) == [1.0, 0.5]
    assert server.calls == 3
    assert [w for w in waits if w > 0] == [0.1, 0.2]  # 0.1 s before the 2nd try, then doubled


def test_a_slow_server_times_out_per_try_and_then_answers(endpoint):
    url, server = endpoint(["slow", "ok"])
    assert score(remote(url, timeout=0.5)) == [1.0, 0.5]
    # the slow reply (1.5 s, then a valid body) was abandoned at 0.5 s: else the first try had answered
    assert server.calls == 2


@pytest.mark.parametrize(("fault", "said"), [
    ("500", "answered 500: overloaded"),
    ("garbage", "garbage reply (JSONDecodeError"),
    ("slow", "no answer within 0.3s"),
])
def test_a_persistent_fault_ends_in_one_error_naming_the_server_and_every_try(endpoint, fault, said):
    url, server = endpoint([fault])
    with pytest.raises(RemoteRewardError) as error:
        score(remote(url, timeout=0.3))
    message = str(error.value)
    assert message.startswith(f"reward server {url}/score gave no usable answer after 3 tries: try 1: ")
    assert message.count(said) == 3, message
    assert server.calls == 3  # bounded: three tries, each named, then one error


def test_a_refusing_server_is_named():
    with socket.socket() as sock:  # a port nobody listens on
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    with pytest.raises(RemoteRewardError, match=r"after 3 tries: try 1: unreachable \(.*refused"):
        score(remote(f"http://127.0.0.1:{port}"))


def test_a_client_error_is_not_retried(endpoint):
    url, server = endpoint(["400"])
    with pytest.raises(RemoteRewardError, match=r"after 1 tries: try 1: answered 400 \(not retried\): bad request"):
        score(remote(url))
    assert server.calls == 1


def test_the_reward_role_names_the_reward_around_the_endpoint_error(endpoint):
    url, _ = endpoint(["500"])
    role = RewardRole(remote(url), "remote")
    with pytest.raises(RewardError, match=r"reward 'remote' raised RemoteRewardError: reward server .* answered 500"):
        role.score(["p", "q"], ["a", "b"], [{}, {}])


def test_judge_retries_then_counts_a_failed_request(endpoint):
    url, server = endpoint(["500", "ok"], ok_body=CHAT)
    judge = JudgeReward(backend="openai", backend_kwargs={"url": url, "model": "m", "backoff_seconds": 0.05,
                                                          "max_parallel": 1})
    out = judge.score(["q"], ["r"], [{}])
    assert out.scores == [0.8] and out.components["judge_failed"] == [0.0] and server.calls == 2


def test_judge_with_some_requests_failing_counts_them(endpoint):
    url, _ = endpoint(["ok", "garbage"], ok_body=CHAT)  # the first request answers, the second never does
    judge = JudgeReward(backend="openai", backend_kwargs={"url": url, "model": "m", "backoff_seconds": 0.01,
                                                          "max_parallel": 1})
    out = judge.score(["q1", "q2"], ["r1", "r2"], [{}, {}])
    assert out.components["judge_failed"] == [0.0, 1.0] and out.scores == [0.8, 0.0]


def test_judge_endpoint_down_is_one_clear_error(endpoint):
    url, server = endpoint(["garbage"], ok_body=CHAT)
    judge = JudgeReward(backend="openai", backend_kwargs={"url": url, "model": "m", "backoff_seconds": 0.01})
    with pytest.raises(EndpointError, match=r"every one of 2 judge requests failed; the first: judge endpoint "
                                            r".*/chat/completions gave no usable answer after 3 tries"):
        judge.score(["q1", "q2"], ["r1", "r2"], [{}, {}])
    assert server.calls == 6


def test_retry_policy_backoff_doubles_and_is_checked():
    assert [RetryPolicy(backoff_seconds=0.5).wait_before(i) for i in range(4)] == [0.0, 0.5, 1.0, 2.0]
    with pytest.raises(ValueError, match="attempts >= 1"):
        RetryPolicy(attempts=0)
