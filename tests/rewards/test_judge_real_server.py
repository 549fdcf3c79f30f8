"""The ``judge`` reward's ``openai`` backend against a real OpenAI-compatible server process on loopback:
``transformers serve`` (transformers' own server, in the default environment) serving the tiny model after
SFT. The judge's replies are the model's: each equals the greedy continuation of the chat-rendered conversation,
computed here with transformers, and the score is that reply parsed (an unparseable one: ``default_score``,
counted). A rubric of two turns sends the judge's own first reply back as the assistant's turn. vLLM's
server is tested the same way in ``.venv-vllm`` (``tests/rollout/test_vllm_server.py``)."""

from __future__ import annotations

import subprocess
import sys
import time
import urllib.request

import pytest
import torch

from rlxf.rewards.judge import JudgeReward
from rlxf.serving.ports import bound_socket

pytest.importorskip("fastapi")
pytest.importorskip("uvicorn")
transformers = pytest.importorskip("transformers")

SERVE = "import sys; from transformers.cli.transformers import main; sys.argv[0] = 'transformers'; sys.exit(main())"
MAX_TOKENS = 6


@pytest.fixture(scope="module")
def judge_server(sft_model_dir, tmp_path_factory):
    with bound_socket("127.0.0.1", 0) as probe:
        port = probe.getsockname()[1]
    log = (tmp_path_factory.mktemp("serve") / "server.log").open("w")
    server = subprocess.Popen([sys.executable, "-c", SERVE, "serve", sft_model_dir, "--host", "127.0.0.1",
                               "--port", str(port)], stdout=log, stderr=subprocess.STDOUT)
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 180
        while True:
            assert server.poll() is None, f"transformers serve exited with {server.returncode}"
            try:
                with urllib.request.urlopen(f"{url}/health", timeout=5):
                    break
            except OSError:
                assert time.monotonic() < deadline, "transformers serve did not answer /health in 180 s"
                time.sleep(1)
        yield url + "/v1"
    finally:
        server.terminate()
        server.wait(timeout=60)
        log.close()


def greedy_reply(model_dir: str, messages: list[dict]) -> str:
    tokenizer = transformers.AutoTokenizer.from_pretrained(model_dir)
    model = transformers.AutoModelForCausalLM.from_pretrained(model_dir)
    ids = tokenizer.apply_chat_template(messages, add_generation_prompt=True, return_tensors="pt", return_dict=True)
    with torch.no_grad():
        out = model.generate(**ids, max_new_tokens=MAX_TOKENS, do_sample=False)
    return tokenizer.decode(out[0, ids["input_ids"].shape[1]:], skip_special_tokens=True)


def test_the_judges_verdicts_are_the_served_models_replies(judge_server, sft_model_dir):
    replies = []
    reward = JudgeReward(backend="openai", rubric="check {prompt}{response}\n", min_score=0, max_score=1,
                         default_score=-1.0, backend_kwargs={"url": judge_server, "model": sft_model_dir,
                                                              "max_tokens": MAX_TOKENS, "temperature": 0.0})
    generate = reward.backend.generate
    reward.backend.generate = lambda prompts: replies.extend(generate(prompts)) or replies[-len(prompts):]
    out = reward.score(["12+3=", "40+7="], ["15", "48"], [{}, {}])
    expected = [greedy_reply(sft_model_dir, [{"role": "user", "content": f"check {q}{a}\n"}])
                for q, a in (("12+3=", "15"), ("40+7=", "48"))]
    assert replies == expected and all(reply.strip() for reply in replies)  # text, not silence
    parsed = [reward.normalized(reply) for reply in replies]
    assert out.scores == [-1.0 if p is None else p for p in parsed]
    assert out.components["judge_malformed"] == [float(p is None) for p in parsed]
    assert out.components["judge_failed"] == [0.0, 0.0]


def test_a_rubric_of_two_turns_sends_the_judges_first_reply_back(judge_server, sft_model_dir):
    reward = JudgeReward(backend="openai", rubric=["check {prompt}\n", "claim {response}\n"], min_score=0,
                         max_score=1, backend_kwargs={"url": judge_server, "model": sft_model_dir,
                                                      "max_tokens": MAX_TOKENS, "temperature": 0.0})
    [last] = reward.converse([("12+3=", "15", {})])
    first = greedy_reply(sft_model_dir, [{"role": "user", "content": "check 12+3=\n"}])
    assert last == greedy_reply(sft_model_dir, [{"role": "user", "content": "check 12+3=\n"},
                                                 {"role": "assistant", "content": first},
                                                 {"role": "user", "content": "claim 15\n"}])
