"""Where a judge's words come from: ``generate(prompts) -> replies`` (a reply is None when it failed).

* ``engine``: a local policy-format model on rlxf's built-in rollout engine (batched, greedy by default);
* ``openai``: any OpenAI-compatible ``/chat/completions`` endpoint over HTTP (stdlib ``urllib``, requests
  in parallel threads, the API key read from the environment variable ``api_key_env``);
* ``module:attr``: any callable ``(prompts) -> replies``.
"""

from __future__ import annotations

import concurrent.futures as futures
import json
import os
import urllib.request
from collections.abc import Callable
from typing import Any

from rlxf.registry import Registry

JUDGE_BACKENDS: Registry[Callable[..., Any]] = Registry("judge backend")


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

    def generate(self, prompts: list[str]) -> list[str | None]:
        from rlxf.data.prompts import render_prompt
        from rlxf.rollout.sampling import SamplingParams

        params = SamplingParams(n=1, temperature=self.temperature, max_new_tokens=self.max_new_tokens)
        replies: list[str | None] = []
        for start in range(0, len(prompts), self.batch_size):
            texts = [render_prompt({"prompt": p}, self.tokenizer, self.chat_template)
                     for p in prompts[start: start + self.batch_size]]
            ids = self.tokenizer(texts, add_special_tokens=False)["input_ids"]
            gen = self.engine.generate(ids, params)
            replies += self.tokenizer.batch_decode(gen.response_ids * gen.response_mask, skip_special_tokens=True)
        return replies


@JUDGE_BACKENDS.register("openai")
class OpenAICompatibleJudge:
    def __init__(
        self, url: str, model: str, api_key_env: str | None = None, max_tokens: int = 512,
        temperature: float = 0.0, timeout_seconds: float = 60.0, max_parallel: int = 8,
    ) -> None:
        self.endpoint = url.rstrip("/") + "/chat/completions"
        self.model, self.max_tokens, self.temperature = model, max_tokens, temperature
        self.api_key = os.environ.get(api_key_env) if api_key_env else None
        self.timeout, self.max_parallel = timeout_seconds, max_parallel

    def ask(self, prompt: str) -> str | None:
        body = {"model": self.model, "messages": [{"role": "user", "content": prompt}],
                "max_tokens": self.max_tokens, "temperature": self.temperature}
        headers = {"Content-Type": "application/json"}
        if self.api_key:
            headers["Authorization"] = f"Bearer {self.api_key}"
        request = urllib.request.Request(self.endpoint, json.dumps(body).encode(), headers, method="POST")
        try:
            with urllib.request.urlopen(request, timeout=self.timeout) as reply:
                return json.loads(reply.read())["choices"][0]["message"]["content"]
        except Exception:  # noqa: BLE001 - a failed request is counted by the judge, never fatal
            return None

    def generate(self, prompts: list[str]) -> list[str | None]:
        with futures.ThreadPoolExecutor(max_workers=self.max_parallel) as pool:
            return list(pool.map(self.ask, prompts))


class CallableJudge:
    def __init__(self, fn: Callable[[list[str]], list[str | None]]) -> None:
        self.fn = fn

    def generate(self, prompts: list[str]) -> list[str | None]:
        return list(self.fn(prompts))


def build_judge_backend(name: str, kwargs: dict[str, Any] | None = None):
    if name in JUDGE_BACKENDS:
        return JUDGE_BACKENDS.get(name)(**(kwargs or {}))
    from rlxf.rewards.registry import import_object

    return CallableJudge(import_object(name))
