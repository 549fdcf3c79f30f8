"""The LLM judge: score parsing (well-formed and malformed), counting, and the OpenAI-compatible backend."""

import pytest

from rlxf.rewards.judge import JudgeReward, parse_judge_score
from tests.rewards.chat_server import chat_server


@pytest.mark.parametrize("text, expected", [
    ("The answer is right.\nScore: 7", 7.0),
    ("reasoning... score: 3.5", 3.5),
    ("Rationale. **Score:** 9", 9.0),
    ("Score: **9**", 9.0),
    ("fine <score>8</score>", 8.0),
    ("[[4]] overall", 4.0),
    ("Score: 7/10", 7.0),
    ("Score: 1/2", 5.0),
    ("first Score: 2, on reflection Score: 6", 6.0),
    ("<score>1</score> ... Score: 9", 1.0),  # tags win over the loose form
])
def test_parse_well_formed(text, expected):
    assert parse_judge_score(text, 0, 10) == expected


@pytest.mark.parametrize("text", [None, "", "no score here", "Score: 11", "Score: -1", "[[x]]", "Score: 3/0"])
def test_parse_malformed_is_none(text):
    assert parse_judge_score(text, 0, 10) is None


def fake_judge(prompts):
    replies = {"good": "Correct. Score: 10", "bad": "Wrong. Score: 0", "weird": "I refuse to grade.", "fail": None}
    return [next(v for k, v in replies.items() if f"Response:\n{k}" in p) for p in prompts]


def test_judge_reward_maps_scores_and_counts_malformed():
    reward = JudgeReward(backend="tests.rewards.test_judge:fake_judge", default_score=0.25)
    out = reward.score(["q"] * 4, ["good", "bad", "weird", "fail"], [{"answer": "1"}] * 4)
    assert out.scores == [1.0, 0.0, 0.25, 0.25]
    assert out.components["judge_malformed"] == [0.0, 0.0, 1.0, 0.0]
    assert out.components["judge_failed"] == [0.0, 0.0, 0.0, 1.0]


def test_judge_prompt_carries_rubric_reference_and_range():
    reward = JudgeReward(backend="tests.rewards.test_judge:fake_judge", min_score=1, max_score=5)
    text = reward.judge_prompt("2+2=", "4", {"answer": "4"})
    assert "Reference answer: 4" in text and "from 1 to 5" in text and "Response:\n4" in text


def test_openai_compatible_backend_round_trip():
    seen = []

    def reply(path, body):
        seen.append((path, body["model"]))
        return "Looks right. Score: 8" if "good" in body["messages"][0]["content"] else "Hmm."

    with chat_server(reply) as url:
        reward = JudgeReward(backend="openai", backend_kwargs={"url": url, "model": "judge-x", "timeout_seconds": 10})
        out = reward.score(["q", "q"], ["good", "bad"], [{}, {}])
    assert out.scores == [0.8, 0.0]
    assert out.components["judge_malformed"] == [0.0, 1.0]
    assert seen[-1] == ("/v1/chat/completions", "judge-x")


def test_api_key_env_sends_the_key_as_a_bearer_token(monkeypatch):
    """backend_kwargs.api_key_env names the variable holding the key; the key itself is never in the config."""
    monkeypatch.setenv("RLXF_TEST_JUDGE_KEY", "s3cret")
    headers: list[dict] = []
    with chat_server(lambda path, body: "Score: 5", headers) as url:
        for kwargs in ({"api_key_env": "RLXF_TEST_JUDGE_KEY"}, {}):
            reward = JudgeReward(backend="openai", backend_kwargs={"url": url, "model": "m", **kwargs})
            assert reward.score(["q"], ["r"], [{}]).scores == [0.5]
    assert headers[0]["Authorization"] == "Bearer s3cret"
    assert "Authorization" not in headers[1]


def test_unreachable_endpoint_is_named_after_its_retries():
    """Every request failed: the endpoint is down, which must not become a batch of default scores."""
    from rlxf.rewards.http_client import EndpointError

    reward = JudgeReward(backend="openai", backend_kwargs={"url": "http://127.0.0.1:9/v1", "model": "m",
                                                           "timeout_seconds": 2, "backoff_seconds": 0.01})
    with pytest.raises(EndpointError, match=r"judge endpoint http://127\.0\.0\.1:9/v1/chat/completions gave no usable "
                                            r"answer after 3 tries: try 1: unreachable"):
        reward.score(["q"], ["r"], [{}])


def test_engine_backend_on_tiny_model_scores_its_greedy_reply(tiny_model_dir):
    """The engine backend's reply is the model's greedy continuation of the judge prompt (checked against
    transformers' generate), and each score is that reply parsed, or default_score when it has no score."""
    import torch

    from rlxf.data.prompt_tokens import render_prompt
    from rlxf.models.loading import load_causal_lm, load_tokenizer

    reward = JudgeReward(backend="engine", backend_kwargs={"path": tiny_model_dir, "max_new_tokens": 8},
                         rubric="Grade {response}. Score: ", default_score=0.37)
    out = reward.score(["p", "p"], ["a", "b"], [{}, {}])
    model, tokenizer = load_causal_lm(tiny_model_dir).eval(), load_tokenizer(tiny_model_dir)
    replies = []
    for response in ("a", "b"):
        text = render_prompt({"prompt": f"Grade {response}. Score: "}, tokenizer, tokenizer.chat_template is not None)
        ids = torch.tensor([tokenizer(text, add_special_tokens=False)["input_ids"]])
        with torch.no_grad():
            new = model.generate(ids, attention_mask=torch.ones_like(ids), max_new_tokens=8, do_sample=False,
                                 eos_token_id=tokenizer.eos_token_id, pad_token_id=tokenizer.pad_token_id)
        replies.append(tokenizer.decode(new[0, ids.shape[1]:], skip_special_tokens=True))
    assert reward.backend.generate([reward.judge_prompt("p", r, {}) for r in ("a", "b")]) == replies
    parsed = [reward.normalized(r) for r in replies]
    assert out.scores == [0.37 if p is None else p for p in parsed]
    assert out.components["judge_malformed"] == [float(p is None) for p in parsed]
    assert out.components["judge_failed"] == [0.0, 0.0]
