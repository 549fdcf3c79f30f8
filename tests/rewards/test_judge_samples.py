"""``judge.samples: k``: k judgments per response combined by vote or mean, the spread as uncertainty; through a
callable backend, the OpenAI-compatible backend against a loopback server, and the built-in engine."""

import itertools
import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from rlxf.rewards.judge import JudgeReward
from rlxf.rewards.judge_votes import combine_samples, majority_vote

_REPLIES = itertools.cycle(["Score: 10", "Score: 0", "Score: 10", "garbled", "Score: 10"])


def cycling_judge(prompts):
    return [next(_REPLIES) for _ in prompts]


@pytest.mark.parametrize("values, expected", [([1, 0, 1], 1), ([0, 0, 1, 1], 0.5), ([0.2], 0.2)])
def test_majority_vote(values, expected):
    assert majority_vote(values) == expected


def test_combine_samples_leaves_out_unparseable():
    assert combine_samples([1.0, None, 0.0, 1.0], "vote") == (1.0, pytest.approx(0.4714045))
    assert combine_samples([1.0, None, 0.0, 1.0], "mean") == (pytest.approx(2 / 3), pytest.approx(0.4714045))
    assert combine_samples([None, None], "mean") == (None, 0.0)


@pytest.mark.parametrize("aggregate, expected", [("vote", 1.0), ("mean", 0.75)])
def test_five_samples_per_response(aggregate, expected):
    global _REPLIES
    _REPLIES = itertools.cycle(["Score: 10", "Score: 0", "Score: 10", "garbled", "Score: 10"])
    reward = JudgeReward(backend="tests.rewards.test_judge_samples:cycling_judge", samples=5, aggregate=aggregate)
    out = reward.score(["q", "q"], ["r1", "r2"], [{}, {}])
    # each response gets the five replies of one cycle: 10, 0, 10, unparseable, 10
    assert out.scores == [expected, expected]
    assert out.components["judge_malformed"] == [0.2, 0.2]
    assert out.components["judge_spread"] == [pytest.approx(0.4330127)] * 2  # pstdev of 1, 0, 1, 1


def test_bad_samples_settings_are_named():
    with pytest.raises(ValueError, match="samples must be >= 1"):
        JudgeReward(backend="tests.rewards.test_judge_samples:cycling_judge", samples=0)
    with pytest.raises(ValueError, match="unknown aggregate 'median'"):
        JudgeReward(backend="tests.rewards.test_judge_samples:cycling_judge", aggregate="median")
    with pytest.raises(ValueError, match="temperature 0"):
        JudgeReward(backend="openai", backend_kwargs={"url": "http://127.0.0.1:9", "model": "m"}, samples=3)


class _SamplingHandler(BaseHTTPRequestHandler):
    """Answers request n of a response with 'Score: 8' unless n % 3 == 2 ('Score: 2'); fails 'bad' ones."""
    counts: dict = {}
    lock = threading.Lock()

    def do_POST(self):  # noqa: N802
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        content = body["messages"][0]["content"]
        if "bad" in content:
            self.send_response(500)
            self.end_headers()
            return
        with self.lock:
            n = self.counts[content] = self.counts.get(content, -1) + 1
        assert body["temperature"] == 0.7
        data = json.dumps({"choices": [{"message": {"content": "Score: 2" if n % 3 == 2 else "Score: 8"}}]}).encode()
        self.send_response(200)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, *args):
        pass


def test_openai_backend_with_three_samples():
    server = ThreadingHTTPServer(("127.0.0.1", 0), _SamplingHandler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        url = f"http://127.0.0.1:{server.server_address[1]}/v1"
        reward = JudgeReward(backend="openai", samples=3, aggregate="mean", default_score=0.1,
                             backend_kwargs={"url": url, "model": "m", "temperature": 0.7, "timeout_seconds": 10})
        out = reward.score(["q", "q"], ["good", "bad"], [{}, {}])
    finally:
        server.shutdown()
    assert out.scores == [pytest.approx(0.6), 0.1]  # mean of 0.8, 0.8, 0.2; every 'bad' request failed
    assert out.components["judge_spread"] == [pytest.approx(0.2828427), 0.0]
    assert out.components["judge_failed"] == [0.0, 1.0]
    assert sum(_SamplingHandler.counts.values()) + len(_SamplingHandler.counts) == 3  # three requests for 'good'


def test_engine_backend_with_samples(tiny_model_dir):
    reward = JudgeReward(backend="engine", samples=4, aggregate="vote", default_score=-1.0,
                         backend_kwargs={"path": tiny_model_dir, "temperature": 1.0, "max_new_tokens": 4,
                                         "chat_template": False})
    out = reward.score(["1+1="], ["2"], [{}])
    # an untrained model writes no parseable score in 4 tokens: all four samples are malformed
    assert out.scores == [-1.0] and out.components["judge_malformed"] == [1.0]
    assert len(reward.backend.generate(["a", "b", "c", "d"])) == 4
