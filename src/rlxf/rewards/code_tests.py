"""The test forms of a code row (``metadata["tests"]``), parsed into what the sandbox runs.

* stdin/stdout: ``[{"input": "1 2\\n", "output": "3\\n"}, ...]`` or APPS' ``{"inputs": [...],
  "outputs": [...]}``: the program runs once per test with ``input`` on stdin; its stdout is compared
  in the trainer's process, up to trailing whitespace per line and trailing blank lines.
* assert: a string (one all-or-nothing test, e.g. HumanEval's ``check`` function and
  ``check(entry_point)``) or a list of strings (one test each), run by the checker.
* function call: ``[{"call": "add", "args": [1, 2], "kwargs": {}, "expected": 3}, ...]`` or APPS'
  call-based ``{"fn_name": "add", "inputs": [[1, 2], ...], "outputs": [3, ...]}``, run by the checker.

Row keys beside ``tests``: ``test_setup`` (trusted code the checker runs before each assert test, e.g.
HumanEval's prompt, which holds helper functions that its tests call) and ``entry_point`` (a name or a
list: the only names of the program the tests may use; without it, the names a test's code mentions).
"""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass
class ParsedTests:
    io: list[tuple[str, str]] = field(default_factory=list)  # (stdin, expected stdout)
    function: list[dict] = field(default_factory=list)  # checker tests, in order

    def __len__(self) -> int:
        return len(self.io) + len(self.function)


def _call(fn: object, args: object, kwargs: object, expected: object) -> dict:
    if not isinstance(fn, str) or not fn.isidentifier():
        raise ValueError(f"a call test needs a function name, got {fn!r:.60}")
    if not isinstance(args, list) or not isinstance(kwargs, dict):
        raise ValueError("a call test needs 'args' as a list and 'kwargs' as an object")
    return {"kind": "call", "fn": fn, "args": args, "kwargs": kwargs, "expected": expected}


def parse_tests(tests: object) -> ParsedTests:
    out = ParsedTests()
    if tests is None:
        return out
    if isinstance(tests, str):
        if tests.strip():
            out.function.append({"kind": "assert", "code": tests})
        return out
    if isinstance(tests, dict):
        inputs, outputs = tests.get("inputs"), tests.get("outputs")
        if not isinstance(inputs, list) or not isinstance(outputs, list) or len(inputs) != len(outputs):
            raise ValueError("tests dict needs equally long 'inputs' and 'outputs' lists")
        if "fn_name" in tests:
            out.function += [_call(tests["fn_name"], i if isinstance(i, list) else [i], {}, o)
                             for i, o in zip(inputs, outputs, strict=True)]
        else:
            out.io += [(str(i), str(o)) for i, o in zip(inputs, outputs, strict=True)]
        return out
    if isinstance(tests, (list, tuple)):
        for t in tests:
            if isinstance(t, str):
                out.function.append({"kind": "assert", "code": t})
            elif isinstance(t, dict) and "output" in t:
                out.io.append((str(t.get("input", "")), str(t["output"])))
            elif isinstance(t, dict) and "call" in t and "expected" in t:
                out.function.append(_call(t["call"], t.get("args", []), t.get("kwargs", {}), t["expected"]))
            else:
                raise ValueError(f"unsupported test entry: {t!r:.100}")
        return out
    raise ValueError(f"unsupported tests value of type {type(tests).__name__}")


def checker_spec(parsed: ParsedTests, meta: dict) -> dict | None:
    """What the checker process receives for this row (None when the row has no function tests)."""
    if not parsed.function:
        return None
    entry = meta.get("entry_point")
    if entry is not None and not (isinstance(entry, str) or (isinstance(entry, list) and all(isinstance(e, str) for e in entry))):
        raise ValueError(f"entry_point must be a name or a list of names, got {entry!r:.60}")
    setup = meta.get("test_setup") or ""
    if not isinstance(setup, str):
        raise ValueError("test_setup must be Python source text")
    return {"tests": parsed.function, "setup": setup, "entry_points": [entry] if isinstance(entry, str) else entry}
