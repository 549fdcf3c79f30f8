"""Chat format ``template``: the tokenizer's own chat template, for chat models (Qwen, Llama, SmolLM2, ...).

A segment's first prompt is the template's rendering of the messages (``tools`` passed to the template, which
writes the tool specs its own way) with the generation prompt. After a policy turn, what is new is the
difference of two renderings: the conversation with the new messages and the generation prompt, less the
conversation as recorded (the reply the endpoint returned as its last message). The template closes an
assistant message with its own end of turn (``<|im_end|>\\n``); the policy's turn already holds the stop
token it sampled, so only what the template writes after that token's text is added (the whole closing
when the turn was cut). When the longer rendering does not start with the shorter one (a template that
rewrites earlier messages once more follow, e.g. dropping past reasoning), the session starts a new segment
and counts a mismatch, as for edited history.

Tool calls are read back in ``tool_call_format``: ``hermes`` (Qwen2.5/3, Hermes, SmolLM3), each call
``<tool_call>{"name": ..., "arguments": {...}}</tool_call>``; the text outside the calls is the content.
"""

from __future__ import annotations

import json
import re
from typing import Any

from rlxf.serving.chat_format import CHAT_FORMATS, message_text

MARK = "\u2063rlxf-turn\u2063"  # an invisible separator nobody writes: locates a turn's content in a rendering
HERMES = re.compile(r"<tool_call>\s*(.*?)\s*</tool_call>", re.DOTALL)


def hermes_calls(text: str) -> tuple[str | None, list[dict]]:
    calls = []
    for raw in HERMES.findall(text):
        try:
            call = json.loads(raw)
        except json.JSONDecodeError:
            continue  # not a call the agent could run: left in the content
        if isinstance(call, dict) and isinstance(call.get("name"), str):
            arguments = call.get("arguments", {})
            calls.append({"name": call["name"],
                          "arguments": arguments if isinstance(arguments, str) else json.dumps(arguments)})
    if not calls:
        return text, []
    content = HERMES.sub("", text).strip()
    return (content or None), calls


TOOL_CALL_FORMATS = {"hermes": hermes_calls}


class TemplateFormat:
    special_tokens_in_text = True  # the template writes BOS and the role markers itself

    def __init__(self, tokenizer, tool_call_format: str = "hermes") -> None:
        if not getattr(tokenizer, "chat_template", None):
            raise ValueError("the tokenizer has no chat template; use chat_format: plain")
        if tool_call_format not in TOOL_CALL_FORMATS:
            raise ValueError(f"tool_call_format {tool_call_format!r} is not one of {', '.join(TOOL_CALL_FORMATS)}")
        self.tokenizer = tokenizer
        self.read_calls = TOOL_CALL_FORMATS[tool_call_format]

    def render(self, messages: list[dict], tools: list[dict] | None, generation: bool) -> str:
        return self.tokenizer.apply_chat_template([_plain(m) for m in messages], tools=tools or None, tokenize=False,
                                                  add_generation_prompt=generation)

    def first_prompt(self, messages: list[dict], tools: list[dict] | None) -> str:
        return self.render(messages, tools, generation=True)

    def continuation(self, known: list[dict], new: list[dict], tools: list[dict] | None, stop_text: str | None) -> list[str] | None:
        if not known or known[-1].get("role") != "assistant":
            return None
        before, after = self.render(known, tools, False), self.render(known + new, tools, True)
        if not after.startswith(before):
            return None
        closing = self.render([*known[:-1], {"role": "assistant", "content": MARK}], tools, False).split(MARK, 1)[-1]
        if stop_text and stop_text in closing:
            closing = closing.split(stop_text, 1)[1]
        return [closing + after[len(before):]]

    def parse(self, text: str, tools: list[dict] | None) -> tuple[str | None, list[dict]]:
        return self.read_calls(text) if tools else (text, [])


def _plain(message: dict) -> dict:
    """A message as templates expect it: text content, tool-call arguments as objects (what most templates
    ``tojson``), no OpenAI-only fields."""
    out: dict[str, Any] = {"role": message.get("role"), "content": message_text(message.get("content"))}
    if message.get("tool_calls"):
        out["tool_calls"] = [{"type": "function", "id": c.get("id"), "function": {
            "name": c.get("function", {}).get("name"), "arguments": _arguments(c.get("function", {}).get("arguments"))}}
            for c in message["tool_calls"]]
    if message.get("tool_call_id"):
        out["tool_call_id"] = message["tool_call_id"]
    return out


def _arguments(arguments: Any) -> Any:
    try:
        return json.loads(arguments) if isinstance(arguments, str) else arguments
    except json.JSONDecodeError:
        return arguments


@CHAT_FORMATS.register("template")
def template_format(tokenizer, **kwargs: Any) -> TemplateFormat:
    return TemplateFormat(tokenizer, **kwargs)
