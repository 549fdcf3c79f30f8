"""Where a judge's words come from: ``generate(prompts) -> replies`` (a reply is None when it failed).

* ``engine``: a local policy-format model on rlxf's built-in rollout engine (batched, greedy by default);
* ``openai``: any OpenAI-compatible ``/chat/completions`` endpoint over HTTP (stdlib ``urllib``, requests
  in parallel threads, each retried with backoff; the API key read from the environment variable
  ``api_key_env``);
* ``module:attr``: any callable ``(prompts) -> replies``.

A prompt is a text (one user message) or a conversation: a list of ``{"role", "content"}`` messages ending
with the user's (a multi-turn rubric, ``rewards/judge.py``).
"""

from __future__ import annotations

import concurrent.futures as futures
import os
from collections.abc import Callable
from typing import Any

from rlxf.registry import Registry
from rlxf.rewards.http_client import EndpointError, RetryPolicy, post_json

JUDGE_BACKENDS: Registry[Callable[..., Any]] = Registry("judge backend")
Prompt = str | list[dict]


def as_messages(prompt: Prompt) -> list[dict]:
    return [{"role": "user", "content": prompt}] if isinstance(prompt, str) else prompt


def plain_transcript(prompt: Prompt, end_of_turn: str) -> str:
    """A conversation for a model without a chat template: the messages in order, each of the judge's own
    replies closed by the end-of-turn text it was trained to stop with (``355</s>``)."""
    if isinstance(prompt, str):
        return prompt
    return "".join(m["content"] + (end_of_turn if m["role"] == "assistant" else "") for m in prompt)


@JUDGE_BACKENDS.register("engine")
class EngineJudge:
    def __init__(
        self, path: str, max_new_tokens: int = 256, temperature: float = 0.0, device: str = "cpu",
        chat_template: bool = True, batch_size: int = 32, dtype: str = "float32",
    ) -> None:
        from rlxf.models.loading import load_causal_lm, load_tokenizer
        from rlxf.rollout.engine import build_engine

        self.tokenizer = load_tokenizer(path)
        model = load_causal_lm(path, dtype, device).eval().requires_grad_(False)
        self.engine = build_engine("torch", model, self.tokenizer.eos_token_id, self.tokenizer.pad_token_id)
        self.max_new_tokens, self.temperature = max_new_tokens, temperature
        self.chat_template = chat_template and self.tokenizer.chat_template is not None
        self.batch_size = batch_size

    def render(self, prompt: Prompt) -> str:
        from rlxf.data.prompt_tokens import render_prompt

        if self.chat_template:
            return render_prompt({"messages": as_messages(prompt)}, self.tokenizer, chat_template=True)
        return plain_transcript(prompt, self.tokenizer.eos_token or "")

    def generate(self, prompts: list[Prompt]) -> list[str | None]:
        from rlxf.rollout.sampling import SamplingParams

        params = SamplingParams(n=1, temperature=self.temperature, max_new_tokens=self.max_new_tokens)
        replies: list[str | None] = []
        for start in range(0, len(prompts), self.batch_size):
            texts = [self.render(p) for p in prompts[start: start + self.batch_size]]
            ids = self.tokenizer(texts, add_special_tokens=False)["input_ids"]
            gen = self.engine.generate(ids, params)
            replies += self.tokenizer.batch_decode(gen.response_ids * gen.response_mask, skip_special_tokens=True)
        return replies


@JUDGE_BACKENDS.register("openai")
class OpenAICompatibleJudge:
    """Each request is retried (``attempts``, ``backoff_seconds``: rewards/http_client.py); a request that
    still fails is None (the judge counts it). When every request of a batch fails the endpoint is
    down: one error names it, rather than a batch of default scores."""

    def __init__(
        self, url: str, model: str, api_key_env: str | None = None, max_tokens: int = 512,
        temperature: float = 0.0, timeout_seconds: float = 60.0, max_parallel: int = 8, attempts: int = 3,
        backoff_seconds: float = 0.5,
    ) -> None:
        self.endpoint = url.rstrip("/") + "/chat/completions"
        self.model, self.max_tokens, self.temperature = model, max_tokens, temperature
        self.api_key = os.environ.get(api_key_env) if api_key_env else None
        self.policy = RetryPolicy(attempts=attempts, backoff_seconds=backoff_seconds, timeout_seconds=timeout_seconds)
        self.max_parallel = max_parallel

    def ask(self, prompt: Prompt) -> str | EndpointError:
        body = {"model": self.model, "messages": as_messages(prompt),
                "max_tokens": self.max_tokens, "temperature": self.temperature}
        headers = {"Authorization": f"Bearer {self.api_key}"} if self.api_key else {}
        try:
            return post_json(self.endpoint, body, _chat_reply_text, self.policy, headers, name="judge endpoint")
        except EndpointError as failure:
            return failure

    def generate(self, prompts: list[Prompt]) -> list[str | None]:
        with futures.ThreadPoolExecutor(max_workers=self.max_parallel) as pool:
            replies = list(pool.map(self.ask, prompts))
        failures = [r for r in replies if isinstance(r, EndpointError)]
        if prompts and len(failures) == len(prompts):
            raise EndpointError(f"every one of {len(prompts)} judge requests failed; the first: {failures[0]}")
        return [None if isinstance(r, EndpointError) else r for r in replies]


def _chat_reply_text(reply: dict) -> str:
    text = reply["choices"][0]["message"]["content"]
    if not isinstance(text, str):
        raise TypeError(f"message content is {type(text).__name__}, not text")
    return text


class CallableJudge:
    def __init__(self, fn: Callable[[list[str]], list[str | None]]) -> None:
        self.fn = fn

    def generate(self, prompts: list[Prompt]) -> list[str | None]:
        return list(self.fn(prompts))


def build_judge_backend(name: str, kwargs: dict[str, Any] | None = None):
    if name in JUDGE_BACKENDS:
        return JUDGE_BACKENDS.get(name)(**(kwargs or {}))
    from rlxf.rewards.registry import import_object

    return CallableJudge(import_object(name))
