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


def solving_judge(prompts):
    """Answers a question with its own sum (wrong for 9+9), then grades the shown claim against it."""
    replies = []
    for conversation in prompts:
        if isinstance(conversation, str):
            replies.append(None)
        elif len(conversation) == 1:
            question = conversation[0]["content"].split()[1].rstrip("=")
            a, b = map(int, question.split("+"))
            replies.append(None if a == 7 else str(a + b if (a, b) != (9, 9) else 17))
        else:
            mine, claim = conversation[1]["content"], conversation[2]["content"].split()[1]
            replies.append(f"Score: {int(mine == claim)}")
    return replies


SEEN: list = []


def recording_judge(prompts):
    SEEN.extend([dict(m) for m in c] for c in prompts)  # copies: the reward extends its conversations in place
    return solving_judge(prompts)


def test_a_rubric_of_turns_shows_the_response_only_after_the_judge_answers():
    SEEN.clear()
    seen = SEEN
    reward = JudgeReward(backend="tests.rewards.test_judge:recording_judge", rubric=["check {prompt}\n", "claim {response}\n"],
                         min_score=0, max_score=1)
    out = reward.score(["3+4=", "3+4=", "9+9=", "7+1="], ["7", "8", "17", "8"], [{}] * 4)
    # right, wrong, wrong but the judge's own mistake agrees (17), the first turn failed (scored default, counted)
    assert out.scores == [1.0, 0.0, 1.0, 0.0] and out.components["judge_failed"] == [0.0, 0.0, 0.0, 1.0]
    firsts = [c for c in seen if len(c) == 1]
    assert [c[0]["content"] for c in firsts] == ["check 3+4=\n", "check 3+4=\n", "check 9+9=\n", "check 7+1=\n"]
    seconds = [c for c in seen if len(c) == 3]  # the failed conversation never gets its second turn
    assert seconds[1] == [{"role": "user", "content": "check 3+4=\n"}, {"role": "assistant", "content": "7"},
                          {"role": "user", "content": "claim 8\n"}] and len(seconds) == 3


def test_plain_transcript_closes_the_judges_own_turns():
    from rlxf.rewards.judge_backends import plain_transcript
    conversation = [{"role": "user", "content": "check 347+8=\n"}, {"role": "assistant", "content": "355"},
                    {"role": "user", "content": "claim 345\n"}]
    assert plain_transcript(conversation, "</s>") == "check 347+8=\n355</s>claim 345\n"
    assert plain_transcript("check 347+8=345\n", "</s>") == "check 347+8=345\n"


def test_a_rubric_must_be_text_or_turns():
    with pytest.raises(ValueError, match="one per turn"):
        JudgeReward(backend="tests.rewards.test_judge:fake_judge", rubric=[])


def test_openai_backend_carries_the_conversation_of_a_rubric_of_turns():
    seen = []

    def reply(path, body):
        seen.append([m["role"] for m in body["messages"]])
        if len(body["messages"]) == 1:
            return "My answer: 7"
        mine = body["messages"][1]["content"].split()[-1]
        return f"Score: {10 if body['messages'][2]['content'].endswith(mine) else 0}"

    with chat_server(reply) as url:
        reward = JudgeReward(backend="openai", backend_kwargs={"url": url, "model": "judge-x", "timeout_seconds": 10},
                             rubric=["Solve this yourself first:\n{prompt}", "Now grade this answer: {response}"])
        out = reward.score(["3+4=", "3+4="], ["7", "8"], [{}, {}])
    assert out.scores == [1.0, 0.0]
    assert sorted(seen) == [["user"], ["user"], ["user", "assistant", "user"], ["user", "assistant", "user"]]
