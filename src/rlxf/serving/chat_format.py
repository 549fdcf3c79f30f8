"""How OpenAI chat messages become text for the policy, one message at a time, and how tool calls are read back.

The endpoint (``openai_app.py``) never renders a whole conversation again once it has started: each new
message is rendered *on its own* by a chat format and tokenized on its own, and the policy's own turns are
the recorded token ids (``session.py``). So a format is a set of per-message pieces, not a template over the
transcript. Registered formats (``CHAT_FORMATS``):

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

CHAT_FORMATS: Registry[Callable[..., ChatFormat]] = Registry("chat format")
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
def plain_format(**kwargs: Any) -> ChatFormat:
    known = set(ChatFormat.__dataclass_fields__)
    if unknown := sorted(set(kwargs) - known):
        raise ValueError(f"chat format 'plain' has no option {', '.join(unknown)}; known: {', '.join(sorted(known))}")
    return ChatFormat(**kwargs)
