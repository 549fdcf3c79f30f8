"""One agent's conversation with the policy: the token ids it was sampled on, exactly as generated.

A session records *segments*. A segment is a prompt (the tokens before the policy's first turn) followed by
pieces: the policy's turns (token ids with their sampling log-probs, loss mask 1) and what the agent said
in between (tokenized on its own, loss mask 0). When the agent sends its transcript back, the session
matches it against what it recorded, message by message (chat) or as a text/token prefix (completions):

* the recorded messages must come first, unchanged — the policy's own turns compared as the content and
  tool calls the endpoint returned (tool-call ids and JSON key order ignored), never re-tokenized;
* what follows is new: system/user/tool messages (or the new text of a completion prompt) are rendered by
  the chat format and tokenized on their own, then generation continues the recorded ids.

Anything else — a message edited, removed or inserted, an assistant message the policy did not write, the
tools changed, a completion prompt that does not extend the recorded text — is a **history mismatch**: it
is counted, and the session starts a new segment whose prompt is the whole conversation as sent (rendered
and tokenized afresh, loss mask 0). The trajectory trained on is the session's last segment with a policy
turn (the one that produced the result the reward scores); the policy tokens of earlier segments are
dropped and counted, because their log-probs were sampled in a context the trained sequence would not show.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field

from rlxf.serving.chat_format import ChatFormat, message_text


class SessionError(ValueError):
    """A request this session cannot serve (the agent's mistake); its text goes back as the error message."""


@dataclass
class Budget:
    max_prompt_tokens: int
    max_total_tokens: int  # a segment's response: the policy's turns and what the agent said after the prompt
    max_turns: int
    max_new_tokens: int  # per turn


@dataclass
class Piece:
    ids: list[int]
    log_probs: list[float] | None  # None: the agent's words (loss mask 0)


@dataclass
class Segment:
    kind: str  # "chat" or "completion"
    prompt: list[int]
    pieces: list[Piece] = field(default_factory=list)
    messages: list[tuple] = field(default_factory=list)  # chat: the normalized messages the tokens hold
    raw: list[dict] = field(default_factory=list)  # chat: the same messages as sent (or, for turns, as returned)
    tools_key: str = ""
    text: str = ""  # completion: the text the tokens hold

    @property
    def ids(self) -> list[int]:
        return self.prompt + [i for p in self.pieces for i in p.ids]

    @property
    def response_length(self) -> int:
        return sum(len(p.ids) for p in self.pieces)

    @property
    def turns(self) -> int:
        return sum(p.log_probs is not None for p in self.pieces)

    @property
    def started(self) -> bool:
        return self.turns > 0


def canonical_arguments(arguments: str | None) -> str:
    try:
        return json.dumps(json.loads(arguments or ""), sort_keys=True)
    except json.JSONDecodeError:
        return arguments or ""


def normalized(message: dict) -> tuple:
    """What must stay equal for a message to match its recorded self."""
    if not isinstance(message, dict) or "role" not in message:
        raise SessionError(f"each message must be an object with a 'role', got {message!r}")
    role, content = message["role"], message_text(message.get("content"))
    if role == "assistant":
        calls = tuple((c.get("function", {}).get("name"), canonical_arguments(c.get("function", {}).get("arguments")))
                      for c in message.get("tool_calls") or [])
        return role, content, calls
    if role == "tool":
        return role, content, message.get("tool_call_id")
    return role, content


class Session:
    def __init__(self, sid: str, key: str, chat_format: ChatFormat, tokenizer, budget: Budget) -> None:
        self.sid, self.key = sid, key
        self.format, self.tokenizer, self.budget = chat_format, tokenizer, budget
        self.segments: list[Segment] = []
        self.mismatches = 0
        self.truncated = False  # a turn was refused or cut by the budget
        self.closed = False  # timed out or finished: later requests are refused
        self.running = False  # its agent has started (the batcher waits for running agents' requests)
        self.requests = 0
        self.stopped_last = False  # the last turn ended with a stop token

    @property
    def segment(self) -> Segment | None:
        return self.segments[-1] if self.segments else None

    def _encode(self, text: str, first: bool = False) -> list[int]:
        return self.tokenizer(text, add_special_tokens=first)["input_ids"] if text else []

    def _new_segment(self, kind: str, prompt: list[int], **fields) -> Segment:
        if len(prompt) > self.budget.max_prompt_tokens:
            raise SessionError(f"the conversation is {len(prompt)} tokens, over data.max_prompt_tokens="
                               f"{self.budget.max_prompt_tokens} for a session's prompt")
        if self.segments:
            self.mismatches += 1
        segment = Segment(kind, prompt, **fields)
        self.segments.append(segment)
        return segment

    def _append(self, segment: Segment, ids: list[int]) -> None:
        """The agent's words: into the prompt before the first turn, else a piece (cut to the budget)."""
        if not segment.started:
            if len(segment.prompt) + len(ids) > self.budget.max_prompt_tokens:
                raise SessionError(f"the conversation is {len(segment.prompt) + len(ids)} tokens, over "
                                   f"data.max_prompt_tokens={self.budget.max_prompt_tokens} for a session's prompt")
            segment.prompt += ids
            return
        room = max(0, self.budget.max_total_tokens - segment.response_length)
        if len(ids) > room:
            self.truncated = True
        if ids[:room]:
            segment.pieces.append(Piece(ids[:room], None))

    def chat_context(self, messages: list[dict], tools: list[dict] | None) -> list[int]:
        """Match ``messages`` to the record, append what is new; the token ids to continue."""
        if not messages:
            raise SessionError("messages is empty")
        norm = [normalized(m) for m in messages]
        tools_key = json.dumps(tools or [], sort_keys=True)
        seg = self.segment
        known = len(seg.messages) if seg is not None else 0
        fresh = [m for m in norm[known:] if m[0] != "assistant"]
        matches = (seg is not None and seg.kind == "chat" and seg.tools_key == tools_key
                   and norm[:known] == seg.messages and len(fresh) == len(norm) - known)
        pieces = None
        if matches:
            pieces = self.format.continuation(seg.raw, messages[known:], tools, self._stop_text(seg))
        if pieces is None:
            text = self.format.first_prompt(messages, tools)
            seg = self._new_segment("chat", self._encode(text, first=not self.format.special_tokens_in_text),
                                    tools_key=tools_key)
        else:
            self._append(seg, [i for piece in pieces for i in self._encode(piece)])
        seg.messages, seg.raw = norm, list(messages)
        return seg.ids

    def _stop_text(self, seg: Segment) -> str | None:
        """The text of the stop token that ended the policy's last turn, None when the turn was cut."""
        last = seg.pieces[-1] if seg.pieces else None
        if last is None or last.log_probs is None or not self.stopped_last:
            return None
        return self.tokenizer.decode(last.ids[-1:], skip_special_tokens=False)

    def completion_context(self, prompt: str | list[int]) -> list[int]:
        seg = self.segment
        if isinstance(prompt, list):
            if seg is not None and seg.kind == "completion" and prompt[: len(seg.ids)] == seg.ids:
                self._append(seg, prompt[len(seg.ids):])
            else:
                seg = self._new_segment("completion", list(prompt))
            return seg.ids
        if seg is not None and seg.kind == "completion" and seg.text and prompt.startswith(seg.text):
            self._append(seg, self._encode(prompt[len(seg.text):]))
        else:
            seg = self._new_segment("completion", self._encode(prompt, first=True))
        seg.text = prompt
        return seg.ids

    def room(self) -> int:
        """New tokens the next turn may have (0: refused by the budget, the reply is empty)."""
        seg = self.segment
        if seg.turns >= self.budget.max_turns:
            self.truncated = True
            return 0
        room = min(self.budget.max_new_tokens, self.budget.max_total_tokens - seg.response_length)
        if room <= 0:
            self.truncated = True
        return max(0, room)

    def record_turn(self, ids: list[int], log_probs: list[float], reply: dict | None = None, text: str = "",
                    stopped: bool = True) -> None:
        """The policy's turn, as generated; ``reply`` (chat) the assistant message returned for it."""
        seg = self.segment
        self.stopped_last = stopped and bool(ids)
        if ids:
            seg.pieces.append(Piece(list(ids), list(log_probs)))
        if seg.kind == "chat":
            seg.messages.append(normalized(reply))
            seg.raw.append(reply)
        else:
            seg.text += text

    def trained_segment(self) -> tuple[Segment | None, int]:
        """(the segment to train on, policy tokens of the earlier segments dropped)."""
        started = [s for s in self.segments if s.started]
        chosen = started[-1] if started else self.segment
        dropped = sum(len(p.ids) for s in self.segments if s is not chosen for p in s.pieces if p.log_probs is not None)
        return chosen, dropped
