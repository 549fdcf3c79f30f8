"""Mutants of a Python module, generated from its syntax tree.

Each :class:`Mutant` is one small change a plausible bug would make (an operator swapped, a term
dropped, a constant off by one, ``mean`` for ``sum``, a ``.detach()`` or a clamp removed, a statement
deleted, a condition negated). It is applied as a text splice of the node's exact source span, so the
rest of the file (and every line number) stays as written.

Skipped on purpose: docstrings and other strings, f-strings, annotations, imports, decorators, code
under ``if TYPE_CHECKING:``, ``raise`` statements (their messages) and ``__all__``: a change there
is not a change of a number.
"""

from __future__ import annotations

import ast
import copy
from collections.abc import Iterator
from dataclasses import dataclass

BINOP_SWAPS = {ast.Add: ast.Sub, ast.Sub: ast.Add, ast.Mult: ast.Div, ast.Div: ast.Mult, ast.Pow: ast.Mult,
               ast.FloorDiv: ast.Div, ast.Mod: ast.FloorDiv}
COMPARE_SWAPS = {ast.Lt: ast.LtE, ast.LtE: ast.Lt, ast.Gt: ast.GtE, ast.GtE: ast.Gt, ast.Eq: ast.NotEq,
                 ast.NotEq: ast.Eq, ast.Is: ast.IsNot, ast.IsNot: ast.Is, ast.In: ast.NotIn, ast.NotIn: ast.In}
# f(...) -> g(...) for a function or method name f.
NAME_SWAPS = {"mean": "sum", "sum": "mean", "max": "min", "min": "max", "maximum": "minimum",
              "minimum": "maximum", "amax": "amin", "amin": "amax", "argmax": "argmin", "argmin": "argmax",
              "clamp_min": "clamp_max", "clamp_max": "clamp_min", "any": "all", "all": "any"}
# x.f(...) -> x: methods whose removal keeps the expression well formed.
REMOVABLE_METHODS = {"detach", "clamp", "clamp_min", "clamp_max", "exp", "log", "square", "sqrt", "abs", "neg"}
REMOVABLE_FUNCTIONS = {"abs"}  # f(x) -> x


@dataclass(frozen=True)
class Mutant:
    """One change to ``path``: the text from (line, col) to (end_line, end_col) becomes ``replacement``
    (columns are UTF-8 byte offsets, as :mod:`ast` gives them)."""

    path: str  # relative to the source root, e.g. "rlxf/algos/kl.py"
    function: str  # the enclosing function or class ("<module>" at top level)
    line: int
    col: int
    end_line: int
    end_col: int
    operator: str  # which kind of change: binop, drop_term, compare, constant, ...
    original: str
    replacement: str
    ordinal: int = 1  # the n-th mutant of the same key in the same function
    shown: str = ""  # the replacement as the report shows it (without the parentheses added to splice it)

    @property
    def description(self) -> str:
        return f"{short(self.original)} -> {short(self.shown or self.replacement)}"

    @property
    def key(self) -> str:
        """Names the mutant without line numbers, so it survives edits elsewhere in the file."""
        suffix = f" #{self.ordinal}" if self.ordinal > 1 else ""
        return f"{self.path} | {self.function} | {self.description}{suffix}"

    def apply(self, source: str) -> str:
        lines = source.encode().splitlines(keepends=True)
        head = b"".join(lines[: self.line - 1]) + lines[self.line - 1][: self.col]
        tail = lines[self.end_line - 1][self.end_col:] + b"".join(lines[self.end_line:])
        return (head + self.replacement.encode() + tail).decode()


def short(text: str, limit: int = 90) -> str:
    text = " ".join(text.split())
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _is_type_checking(node: ast.AST) -> bool:
    test = getattr(node, "test", None)
    return isinstance(node, ast.If) and getattr(test, "id", getattr(test, "attr", None)) == "TYPE_CHECKING"


def _skipped_children(node: ast.AST) -> set[int]:
    """ids of child nodes that hold no numeric behaviour (annotations, decorators, docstrings)."""
    skip: list[ast.AST] = []
    if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
        skip += node.decorator_list
        if not isinstance(node, ast.ClassDef) and node.returns is not None:
            skip.append(node.returns)
    if isinstance(node, ast.arg) and node.annotation is not None:
        skip.append(node.annotation)
    if isinstance(node, ast.AnnAssign):
        skip.append(node.annotation)
    body = getattr(node, "body", None)
    if isinstance(body, list) and body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant) \
            and isinstance(body[0].value.value, str):
        skip.append(body[0])
    return {id(n) for n in skip}


def _constant_changes(value: object) -> list[object]:
    if isinstance(value, bool):
        return [not value]
    if isinstance(value, int):
        return [1] if value == 0 else [0, 2] if value == 1 else [value + 1]
    if isinstance(value, float):
        return [1.0] if value == 0.0 else [0.0, 2.0] if value == 1.0 else [value * 2]
    return []


def _call_name(call: ast.Call) -> str | None:
    if isinstance(call.func, ast.Attribute):
        return call.func.attr
    return call.func.id if isinstance(call.func, ast.Name) else None


def _renamed_call(call: ast.Call, new_name: str) -> ast.Call:
    new = copy.deepcopy(call)
    if isinstance(new.func, ast.Attribute):
        new.func.attr = new_name
    else:
        new.func.id = new_name
    return new


def _expression_changes(node: ast.AST) -> Iterator[tuple[str, ast.AST]]:
    """(operator, replacement node) for every change of one expression node."""
    if isinstance(node, ast.BinOp):
        if type(node.op) in BINOP_SWAPS:
            yield "binop", ast.BinOp(node.left, BINOP_SWAPS[type(node.op)](), node.right)
        if isinstance(node.op, (ast.Add, ast.Sub, ast.Mult, ast.Div)):
            yield "drop_term", node.left
        if isinstance(node.op, (ast.Add, ast.Mult)):
            yield "drop_term", node.right
    elif isinstance(node, ast.UnaryOp) and isinstance(node.op, (ast.USub, ast.Not)):
        yield "unary", node.operand
    elif isinstance(node, ast.BoolOp):
        yield "boolop", ast.BoolOp(ast.Or() if isinstance(node.op, ast.And) else ast.And(), node.values)
    elif isinstance(node, ast.Compare):
        for i, op in enumerate(node.ops):
            if type(op) in COMPARE_SWAPS:
                ops = list(node.ops)
                ops[i] = COMPARE_SWAPS[type(op)]()
                yield "compare", ast.Compare(node.left, ops, node.comparators)
    elif isinstance(node, ast.Constant):
        for value in _constant_changes(node.value):
            yield "constant", ast.Constant(value)
    elif isinstance(node, ast.Call):
        yield from _call_changes(node)
    elif isinstance(node, ast.IfExp):
        yield "negate_condition", ast.IfExp(ast.UnaryOp(ast.Not(), node.test), node.body, node.orelse)


def _call_changes(node: ast.Call) -> Iterator[tuple[str, ast.AST]]:
    name = _call_name(node)
    if name in NAME_SWAPS and not (isinstance(node.func, ast.Name) and name not in ("max", "min", "any", "all")):
        yield "swap_call", _renamed_call(node, NAME_SWAPS[name])
    if isinstance(node.func, ast.Attribute) and name in REMOVABLE_METHODS:
        yield "remove_call", node.func.value
    if isinstance(node.func, ast.Name) and name in REMOVABLE_FUNCTIONS and len(node.args) == 1:
        yield "remove_call", node.args[0]
    if name in ("clamp", "clamp_", "clip") and len(node.args) + len(node.keywords) == 2:
        # a two-sided clamp loses one side
        for i in range(len(node.keywords)):
            yield "drop_bound", ast.Call(node.func, node.args, node.keywords[:i] + node.keywords[i + 1:])
        if len(node.args) == 2:
            yield "drop_bound", ast.Call(node.func, node.args[:1], [])


def _statement_changes(node: ast.stmt) -> Iterator[tuple[str, str]]:
    """(operator, replacement text) for a whole statement."""
    deletable = (
        (isinstance(node, ast.Expr) and isinstance(node.value, ast.Call))
        or isinstance(node, ast.AugAssign)
        or (isinstance(node, ast.Assign) and all(isinstance(t, (ast.Attribute, ast.Subscript)) for t in node.targets))
    )
    if deletable:
        yield "delete_statement", "pass"


class _Collector(ast.NodeVisitor):
    def __init__(self, path: str, source: str) -> None:
        self.path, self.source = path, source
        self.scope = ["<module>"]
        self.skip: set[int] = set()
        self.found: list[Mutant] = []
        self.spans: set[tuple[tuple[int, int, int, int], str]] = set()

    def _add(self, node: ast.AST, operator: str, replacement: str, shown: str = "") -> None:
        original = ast.get_source_segment(self.source, node) or ast.unparse(node)
        span = (node.lineno, node.col_offset, node.end_lineno, node.end_col_offset)
        if (shown or replacement) == original or (span, replacement) in self.spans:
            return  # no change, or the same change already found (``x * x`` dropping either side)
        self.spans.add((span, replacement))
        self.found.append(Mutant(self.path, self.scope[-1], *span, operator, original, replacement, shown=shown))

    def generic_visit(self, node: ast.AST) -> None:
        self.skip |= _skipped_children(node)
        for child in ast.iter_child_nodes(node):
            if id(child) not in self.skip:
                self.visit(child)

    def visit_FunctionDef(self, node: ast.FunctionDef) -> None:
        self.scope.append(node.name)
        self.generic_visit(node)
        self.scope.pop()

    visit_AsyncFunctionDef = visit_FunctionDef
    visit_ClassDef = visit_FunctionDef

    def visit_If(self, node: ast.If) -> None:
        if _is_type_checking(node):
            return
        self._add(node.test, "negate_condition", f"not ({ast.get_source_segment(self.source, node.test)})")
        self.generic_visit(node)

    def visit_Import(self, node: ast.AST) -> None:
        return

    visit_ImportFrom = visit_Import
    visit_Raise = visit_Import
    visit_JoinedStr = visit_Import

    def visit_Assign(self, node: ast.Assign) -> None:
        if any(isinstance(t, ast.Name) and t.id == "__all__" for t in node.targets):
            return
        self._visit_statement(node)

    def _visit_statement(self, node: ast.stmt) -> None:
        for operator, text in _statement_changes(node):
            self._add(node, operator, text)
        self.generic_visit(node)

    visit_Expr = _visit_statement
    visit_AugAssign = _visit_statement

    def visit(self, node: ast.AST) -> None:
        if isinstance(node, ast.expr):
            for operator, new in _expression_changes(node):
                text = ast.unparse(new)
                self._add(node, operator, f"({text})", shown=text)
        super().visit(node)


def module_mutants(path: str, source: str) -> list[Mutant]:
    """Every mutant of ``source`` (the text of ``path``), in source order; the same text gives the same
    list. Keys that repeat within a function are told apart by their ``ordinal`` (``#2``, ``#3`` ...)."""
    collector = _Collector(path, source)
    collector.visit(ast.parse(source))
    ordered = sorted(collector.found, key=lambda m: (m.line, m.col, m.end_line, m.end_col, m.operator, m.replacement))
    seen: dict[str, int] = {}
    unique = []
    for mutant in ordered:
        seen[mutant.key] = seen.get(mutant.key, 0) + 1
        if seen[mutant.key] > 1:
            mutant = Mutant(**{**mutant.__dict__, "ordinal": seen[mutant.key]})
        unique.append(mutant)
    return unique
