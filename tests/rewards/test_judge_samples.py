"""``judge.samples: k``: k judgments per response combined by vote or mean, the spread as uncertainty; through a
callable backend, the OpenAI-compatible backend against a loopback server, and the built-in engine."""

import itertools
import threading

import pytest

from rlxf.rewards.judge import JudgeReward
from rlxf.rewards.judge_votes import combine_samples, majority_vote
from tests.rewards.chat_server import chat_server

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


def test_openai_backend_with_three_samples():
    counts, lock = {}, threading.Lock()

    def reply(path, body):  # request n for a response: 'Score: 8', but 'Score: 2' when n % 3 == 2; 'bad' fails
        content = body["messages"][0]["content"]
        assert body["temperature"] == 0.7
        if "bad" in content:
            return None
        with lock:
            n = counts[content] = counts.get(content, -1) + 1
        return "Score: 2" if n % 3 == 2 else "Score: 8"

    with chat_server(reply) as url:
        reward = JudgeReward(backend="openai", samples=3, aggregate="mean", default_score=0.1,
                             backend_kwargs={"url": url, "model": "m", "temperature": 0.7, "timeout_seconds": 10})
        out = reward.score(["q", "q"], ["good", "bad"], [{}, {}])
    assert out.scores == [pytest.approx(0.6), 0.1]  # mean of 0.8, 0.8, 0.2; every 'bad' request failed
    assert out.components["judge_spread"] == [pytest.approx(0.2828427), 0.0]
    assert out.components["judge_failed"] == [0.0, 1.0]
    assert list(counts.values()) == [2]  # three requests for 'good' (n = 0, 1, 2)


def test_engine_backend_with_samples(tiny_model_dir):
    reward = JudgeReward(backend="engine", samples=4, aggregate="vote", default_score=-1.0,
                         backend_kwargs={"path": tiny_model_dir, "temperature": 1.0, "max_new_tokens": 4,
                                         "chat_template": False})
    out = reward.score(["1+1="], ["2"], [{}])
    # an untrained model writes no parseable score in 4 tokens: all four samples are malformed
    assert out.scores == [-1.0] and out.components["judge_malformed"] == [1.0]
    assert len(reward.backend.generate(["a", "b", "c", "d"])) == 4
