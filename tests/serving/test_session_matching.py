"""Session bookkeeping without a server: which messages are new, what a mismatch does, budgets, and the
chat format's tool-call parsing (hand-written expectations)."""

import json

import pytest

from rlxf.serving.chat_format import CHAT_FORMATS
from rlxf.serving.session import Budget, Session, SessionError

CALC = {"type": "function", "function": {"name": "calculator", "parameters": {"properties": {"expression": {}}}}}
TWO = {"type": "function", "function": {"name": "search", "parameters": {"properties": {"q": {}, "k": {}}}}}
EOS = 2


@pytest.fixture
def fmt():
    return CHAT_FORMATS.get("plain")(tool_aliases={"calc": "calculator"})


def session(tokenizer, fmt, **budget):
    return Session("s", "k", fmt, tokenizer, Budget(**{"max_prompt_tokens": 32, "max_total_tokens": 20,
                                                      "max_turns": 3, "max_new_tokens": 8, **budget}))


def ids(tokenizer, text):
    return tokenizer(text, add_special_tokens=False)["input_ids"]


def test_tool_calls_parse_into_openai_arguments(fmt):
    assert fmt.parse("@calc(2*3)", [CALC]) == (None, [{"name": "calculator", "arguments": '{"expression": "2*3"}'}])
    assert fmt.parse("so @search({\"q\": \"x\", \"k\": 2})", [TWO]) == (
        "so ", [{"name": "search", "arguments": '{"q": "x", "k": 2}'}])
    assert fmt.parse("@search(cats)", [TWO]) == (None, [{"name": "search", "arguments": '{"input": "cats"}'}])
    assert fmt.parse("@calc(2*3) and more", [CALC]) == ("@calc(2*3) and more", [])  # a call ends the turn
    assert fmt.parse("@calc(2*3)", None) == ("@calc(2*3)", [])  # no tools offered: plain text
    call = {"function": {"name": "calculator", "arguments": json.dumps({"expression": "4+4"})}}
    assert fmt.message({"role": "assistant", "content": None, "tool_calls": [call]}, [CALC]) == "@calc(4+4)</s>"
    assert fmt.header([CALC, TWO]) == "tools: calculator, search\n"
    assert fmt.message({"role": "tool", "content": "8"}) == "=8\n"
    with pytest.raises(ValueError, match="unknown message role 'robot'"):
        fmt.message({"role": "robot", "content": "hi"})


def test_new_messages_are_appended_and_the_policy_turn_is_never_retokenized(tokenizer, fmt):
    s = session(tokenizer, fmt)
    first = s.chat_context([{"role": "user", "content": "2*3="}], [CALC])
    assert first == tokenizer("tools: calculator\n2*3=")["input_ids"]
    generated = [50, 51, EOS]  # whatever the policy sampled: kept as ids, compared as the reply returned
    reply = {"role": "assistant", "content": None, "tool_calls": [
        {"id": "call_a", "type": "function", "function": {"name": "calculator", "arguments": '{"expression": "2*3"}'}}]}
    s.record_turn(generated, [-1.0, -2.0, -3.0], reply)
    sent_back = {**reply, "tool_calls": [{**reply["tool_calls"][0], "id": "other",  # ids and key order ignored
                                          "function": {"arguments": '{ "expression":"2*3" }', "name": "calculator"}}]}
    tool = {"role": "tool", "tool_call_id": "call_a", "content": "6"}
    second = s.chat_context([{"role": "user", "content": "2*3="}, sent_back, tool], [CALC])
    assert second == first + generated + ids(tokenizer, "=6\n") and s.mismatches == 0
    seg = s.segment
    assert [(p.ids, p.log_probs) for p in seg.pieces] == [(generated, [-1.0, -2.0, -3.0]), (ids(tokenizer, "=6\n"), None)]
    assert s.room() == min(8, 20 - 6)  # 3 generated + 3 observation tokens of 20


def test_an_edited_transcript_starts_a_new_segment(tokenizer, fmt):
    s = session(tokenizer, fmt)
    s.chat_context([{"role": "user", "content": "1+1="}], None)
    s.record_turn([20, EOS], [-0.5, -0.5], {"role": "assistant", "content": "3"})
    context = s.chat_context([{"role": "user", "content": "1+1="}, {"role": "assistant", "content": "2"},
                              {"role": "user", "content": "+1="}], None)
    assert s.mismatches == 1 and len(s.segments) == 2
    assert context == tokenizer("1+1=2</s>+1=")["input_ids"]
    s.record_turn([21, EOS], [-0.25, -0.25], {"role": "assistant", "content": "3"})
    chosen, dropped = s.trained_segment()
    assert chosen is s.segments[1] and dropped == 2
    # removing a message, or changing the tools, is a mismatch too
    s.chat_context([{"role": "user", "content": "1+1="}], [CALC])
    assert s.mismatches == 2


def test_budgets_cut_observations_and_refuse_turns(tokenizer, fmt):
    s = session(tokenizer, fmt, max_total_tokens=6, max_turns=2)
    s.completion_context("ab")
    s.record_turn([30, 31, EOS], [-1.0] * 3, text="xy")
    assert s.completion_context("abxy" + "0123456789") == tokenizer("ab")["input_ids"] + [30, 31, EOS] + ids(tokenizer, "012")
    assert s.truncated and s.room() == 0  # 6 of 6 used
    s2 = session(tokenizer, fmt, max_turns=1)
    s2.completion_context([5, 6])
    s2.record_turn([7], [-1.0], text="q")
    assert s2.completion_context([5, 6, 7, 8]) == [5, 6, 7, 8] and s2.room() == 0  # one turn allowed
    with pytest.raises(SessionError, match="over data.max_prompt_tokens=32"):
        session(tokenizer, fmt).completion_context("9" * 40)


def test_template_format_appends_only_what_the_template_writes_after_the_turn(tokenizer):
    # the char tokenizer's template: "user: ...\n", "assistant: ...\n</s>", generation prompt "assistant: "
    fmt = CHAT_FORMATS.get("template")(tokenizer)
    s = session(tokenizer, fmt, max_prompt_tokens=64, max_total_tokens=64)
    first = s.chat_context([{"role": "user", "content": "2*3="}], None)
    assert first == ids(tokenizer, "user: 2*3=\nassistant: ")
    s.record_turn(ids(tokenizer, "6") + [EOS], [-1.0, -1.0], {"role": "assistant", "content": "6"}, stopped=True)
    history = [{"role": "user", "content": "2*3="}, {"role": "assistant", "content": "6"}]
    second = s.chat_context([*history, {"role": "user", "content": "+1="}], None)
    # the template's "\n</s>" after the reply: the sampled </s> stands for it, nothing is added before the user
    assert second == first + ids(tokenizer, "6") + [EOS] + ids(tokenizer, "user: +1=\nassistant: ")
    s.record_turn(ids(tokenizer, "77"), [-1.0, -1.0], {"role": "assistant", "content": "77"}, stopped=False)
    third = s.chat_context([*history, {"role": "user", "content": "+1="}, {"role": "assistant", "content": "77"},
                            {"role": "user", "content": "?"}], None)
    # a turn cut by its budget is closed as the template closes it
    assert third == second + ids(tokenizer, "77") + ids(tokenizer, "\n") + [EOS] + ids(tokenizer, "user: ?\nassistant: ")
    assert s.mismatches == 0


def test_hermes_tool_calls_are_read_back():
    from rlxf.serving.template_format import hermes_calls

    text = 'Let me compute. <tool_call>\n{"name": "calculator", "arguments": {"expression": "2*3"}}\n</tool_call>'
    assert hermes_calls(text) == ("Let me compute.", [{"name": "calculator", "arguments": '{"expression": "2*3"}'}])
    assert hermes_calls("<tool_call>not json</tool_call>") == ("<tool_call>not json</tool_call>", [])
