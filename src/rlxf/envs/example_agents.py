"""Example agent programs for ``env: openai_agent``, written only against the ``openai`` client.

Nothing here imports rlxf: an agent is any program that talks to an OpenAI-compatible server. rlxf hands it
a client pointed at the policy being trained (recipe ``openai_agent.yaml``, docs/environments.md).
"""

from __future__ import annotations

import ast
import json
import operator

CALCULATOR = {
    "type": "function",
    "function": {
        "name": "calculator",
        "description": "Evaluate an arithmetic expression such as 347*582.",
        "parameters": {"type": "object", "properties": {"expression": {"type": "string"}}, "required": ["expression"]},
    },
}
_OPS = {ast.Add: operator.add, ast.Sub: operator.sub, ast.Mult: operator.mul, ast.FloorDiv: operator.floordiv,
        ast.Mod: operator.mod}


def evaluate(expression: str) -> str:
    """The agent's own calculator: integers and + - * // % only; anything else is an error message."""
    def value(node: ast.AST) -> int:
        if isinstance(node, ast.Constant) and type(node.value) is int:
            return node.value
        if isinstance(node, ast.BinOp) and type(node.op) in _OPS:
            return _OPS[type(node.op)](value(node.left), value(node.right))
        if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub):
            return -value(node.operand)
        raise ValueError("not an integer expression")

    try:
        return str(value(ast.parse(expression.strip(), mode="eval").body))
    except (SyntaxError, ValueError, ZeroDivisionError) as err:
        return f"error: {err}"


def calculator_agent(client, task: dict, max_calls: int = 3) -> str:
    """A tool-calling loop: ask with the calculator offered, run each call, send the results back, and
    return the first reply without a call (the answer; the task's verifier scores it)."""
    messages = [{"role": "user", "content": task["prompt"]}]
    for _ in range(max_calls + 1):
        reply = client.chat.completions.create(model="policy", messages=messages, tools=[CALCULATOR])
        message = reply.choices[0].message
        if not message.tool_calls:
            return message.content or ""
        messages.append(message.model_dump(exclude_none=True))
        for call in message.tool_calls:
            try:
                expression = json.loads(call.function.arguments).get("expression", "")
            except (json.JSONDecodeError, AttributeError):
                expression = ""
            messages.append({"role": "tool", "tool_call_id": call.id, "content": evaluate(str(expression))})
    return ""
