"""Tools an environment can offer, by name: ``calculator`` and ``python`` (the code sandbox).

A tool is a function ``(arguments: str) -> str``; it raises ``ToolError`` for bad input, and the
environment returns the error text as the observation (the policy sees its mistake, training goes on).
"""

from __future__ import annotations

import ast
import operator
from collections.abc import Callable

from rlxf.registry import Registry

TOOLS: Registry[Callable[[str], str]] = Registry("tool")


class ToolError(ValueError):
    """The tool could not run on these arguments; the message is shown to the policy."""


_BINARY = {
    ast.Add: operator.add, ast.Sub: operator.sub, ast.Mult: operator.mul, ast.Div: operator.truediv,
    ast.FloorDiv: operator.floordiv, ast.Mod: operator.mod, ast.Pow: operator.pow,
}
_UNARY = {ast.USub: operator.neg, ast.UAdd: operator.pos}


def _evaluate(node: ast.AST) -> int | float:
    if isinstance(node, ast.Constant) and type(node.value) in (int, float):
        return node.value
    if isinstance(node, ast.BinOp) and type(node.op) in _BINARY:
        left, right = _evaluate(node.left), _evaluate(node.right)
        if isinstance(node.op, ast.Pow) and abs(right) > 64:
            raise ToolError("exponent too large")
        try:
            return _BINARY[type(node.op)](left, right)
        except ZeroDivisionError:
            raise ToolError("division by zero") from None
    if isinstance(node, ast.UnaryOp) and type(node.op) in _UNARY:
        return _UNARY[type(node.op)](_evaluate(node.operand))
    raise ToolError("only numbers, + - * / // % ** and parentheses")


@TOOLS.register("calculator")
def calculator(arguments: str) -> str:
    """Evaluate an arithmetic expression: ``347*582`` -> ``201954``; integral floats print as integers."""
    if len(arguments) > 200:
        raise ToolError("expression too long")
    try:
        tree = ast.parse(arguments.strip(), mode="eval")
    except SyntaxError:
        raise ToolError("not an arithmetic expression") from None
    value = _evaluate(tree.body)
    if isinstance(value, float) and value.is_integer():
        value = int(value)
    return str(value)


@TOOLS.register("python")
def python(arguments: str, max_chars: int = 500) -> str:
    """Run a Python program in the code sandbox; its stdout (or the tail of its stderr) is the result."""
    from rlxf.rewards.sandbox import run_python
    from rlxf.rewards.sandbox_limits import SandboxLimits

    result = run_python(arguments, limits=SandboxLimits(cpu_seconds=5, wall_seconds=10))
    if not result.ok:
        reason = result.killed_reason or f"exit status {result.returncode}"
        raise ToolError(f"{reason}: {result.stderr[-max_chars:].strip()}")
    return result.stdout[:max_chars]
