"""How OpenAI chat messages become text for the policy, and how tool calls are read back.

The endpoint (``openai_app.py``) renders a whole conversation only when a segment starts (``first_prompt``);
after that, only what is new is rendered (``continuation``: the texts to tokenize, each on its own, between
the policy's last turn and its next) and the policy's own turns stay the recorded token ids
(``session.py``). ``CHAT_FORMATS`` maps a name to ``factory(tokenizer, **format_kwargs)``:

``template`` (``template_format.py``) — the tokenizer's own chat template, for chat models.

``plain`` — for models without a chat template (the tiny char model), every piece a format string:

    system     "{content}\\n"          user   "{content}"        tool result   "={content}\\n"
    tools      "tools: {names}\\n"     (once, before the first message, when the request offers tools)
    assistant  "" before a generated turn; an assistant message the policy did not write (a new segment
               after edited history) is rendered as its content, its tool calls, and the EOS token text.

Tool calls use the ``tool_use`` environment's documented format: a policy turn that *ends with*
``@NAME(ARGUMENTS)`` is a call. The endpoint returns it as an OpenAI ``tool_calls`` entry: ``NAME`` through
``tool_aliases`` (what the model writes -> the agent's function name, e.g. ``{calc: calculator}``), and
``ARGUMENTS`` as the JSON object string OpenAI clients expect: the text itself when it is a JSON object, else
``{"<the only parameter>": text}`` when the offered function has exactly one parameter, else
``{"input": text}``. The text before the call is the message's ``content`` (None when empty).
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from rlxf.registry import Registry

CHAT_FORMATS: Registry[Callable[..., ChatFormat]] = Registry("chat format", modules={"template": "rlxf.serving.template_format"})
TOOL_CALL = re.compile(r"@([A-Za-z_]\w*)\((.*)\)\s*$", re.DOTALL)


def message_text(content: Any) -> str:
    """OpenAI content: a string, None, or a list of parts (only ``text`` parts are read)."""
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "".join(part.get("text", "") for part in content if isinstance(part, dict) and part.get("type") == "text")
    raise ValueError(f"message content must be a string or a list of parts, got {type(content).__name__}")


def function_parameters(tools: list[dict] | None) -> dict[str, list[str]]:
    """Offered function name -> its parameter names (OpenAI ``tools``: ``{type: function, function: {...}}``)."""
    out = {}
    for tool in tools or []:
        fn = tool.get("function") or {}
        if tool.get("type", "function") != "function" or "name" not in fn:
            raise ValueError(f"each tool must be {{'type': 'function', 'function': {{'name': ...}}}}, got {tool!r}")
        out[fn["name"]] = list((fn.get("parameters") or {}).get("properties") or {})
    return out


@dataclass
class ChatFormat:
    special_tokens_in_text = False  # the first prompt gets the tokenizer's special tokens (BOS), as plain prompts do
    system: str = "{content}\n"
    user: str = "{content}"
    tool: str = "={content}\n"
    tools_header: str = "tools: {names}\n"
    assistant_prefix: str = ""
    end_of_turn: str = "</s>"  # the EOS text, closing an assistant message the policy did not write
    tool_aliases: dict[str, str] = field(default_factory=dict)

    def header(self, tools: list[dict] | None) -> str:
        """The text before the first message: the offered tools (``{names}``: comma-separated, ``{specs}``: JSON)."""
        if not tools:
            return ""
        names = ", ".join(function_parameters(tools))
        return self.tools_header.format(names=names, specs=json.dumps([t.get("function") for t in tools]))

    def message(self, message: dict, tools: list[dict] | None = None) -> str:
        """One message that is not a generated turn, as text."""
        role = message.get("role")
        content = message_text(message.get("content"))
        if role == "assistant":
            calls = "".join(self.call_text(call, tools) for call in message.get("tool_calls") or [])
            return self.assistant_prefix + content + calls + self.end_of_turn
        pieces = {"system": self.system, "developer": self.system, "user": self.user, "tool": self.tool}
        if role not in pieces:
            raise ValueError(f"unknown message role {role!r}; known: {', '.join([*pieces, 'assistant'])}")
        return pieces[role].format(content=content)

    def first_prompt(self, messages: list[dict], tools: list[dict] | None) -> str:
        return self.header(tools) + "".join(self.message(m, tools) for m in messages) + self.assistant_prefix

    def continuation(self, known: list[dict], new: list[dict], tools: list[dict] | None, stop_text: str | None) -> list[str] | None:
        """The texts after the policy's last turn (``stop_text``: its stop token's text, None if it was cut);
        None when ``new`` cannot follow ``known`` in this format (then the session starts a new segment)."""
        return [self.message(m, tools) for m in new] + [self.assistant_prefix]

    def call_text(self, call: dict, tools: list[dict] | None) -> str:
        fn = call.get("function") or {}
        name = {agent: model for model, agent in self.tool_aliases.items()}.get(fn.get("name"), fn.get("name"))
        arguments = fn.get("arguments") or ""
        try:
            parsed = json.loads(arguments)
        except json.JSONDecodeError:
            parsed = None
        params = function_parameters(tools).get(fn.get("name"), [])
        if isinstance(parsed, dict) and len(params) == 1 and set(parsed) == set(params):
            arguments = str(parsed[params[0]])
        return f"@{name}({arguments})"

    def parse(self, text: str, tools: list[dict] | None) -> tuple[str | None, list[dict]]:
        """A generated turn's text -> (content, tool calls as ``{name, arguments}``). Calls only when tools are offered."""
        match = TOOL_CALL.search(text) if tools else None
        if match is None:
            return text, []
        name = self.tool_aliases.get(match.group(1), match.group(1))
        raw = match.group(2)
        try:
            parsed = json.loads(raw)
        except json.JSONDecodeError:
            parsed = None
        if not isinstance(parsed, dict):
            params = function_parameters(tools).get(name, [])
            parsed = {params[0] if len(params) == 1 else "input": raw}
        content = text[: match.start()]
        return (content or None), [{"name": name, "arguments": json.dumps(parsed)}]


@CHAT_FORMATS.register("plain")
def plain_format(tokenizer=None, **kwargs: Any) -> ChatFormat:
    known = set(ChatFormat.__dataclass_fields__)
    if unknown := sorted(set(kwargs) - known):
        raise ValueError(f"chat format 'plain' has no option {', '.join(unknown)}; known: {', '.join(sorted(known))}")
    return ChatFormat(**kwargs)
