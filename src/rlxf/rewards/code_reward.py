"""Reward for code generation: run the policy's program against unit tests in the sandbox.

``metadata["tests"]`` of a row may be

* stdin/stdout tests: ``[{"input": "1 2\\n", "output": "3\\n"}, ...]`` (or ``{"inputs": [...], "outputs": [...]}``):
  the program is run once per test with ``input`` on stdin, and passes when its stdout equals ``output``
  up to trailing whitespace on each line and trailing blank lines;
* assert tests: a list of Python snippets (``["assert f(1) == 2", ...]``), each appended to the program
  and run separately, or a single string (appended as a whole: one test). A snippet passes when the
  program plus the snippet exits with status 0.

Scores: ``mode="fraction"`` gives the fraction of tests passed, ``mode="all_pass"`` 1.0 only when all
pass. Components: ``pass_fraction`` and ``sandbox_error`` (1.0 when any run of that response was stopped
by a limit or the sandbox failed). Nothing the candidate does makes ``score`` raise; a malformed row or
a response without tests scores 0.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass

from rlxf.rewards.base import RewardOutput
from rlxf.rewards.registry import REWARDS
from rlxf.rewards.sandbox import CodeSandbox, SandboxJob, SandboxResult
from rlxf.rewards.sandbox_limits import SandboxLimits

__all__ = ["CodeTestsReward", "extract_program", "outputs_match"]

_FENCE = re.compile(r"```[ \t]*([A-Za-z0-9_+.-]*)[^\n]*\n(.*?)(?:```|\Z)", re.DOTALL)
_PY_TAGS = {"python", "py", "python3", "py3"}


def extract_program(response: str) -> str:
    """The last ```python fenced block of ``response``; else the last fenced block; else the raw text."""
    blocks = [(m.group(1).lower(), m.group(2)) for m in _FENCE.finditer(response)]
    python_blocks = [code for tag, code in blocks if tag in _PY_TAGS]
    if python_blocks:
        return python_blocks[-1]
    if blocks:
        return blocks[-1][1]
    return response


def _normalize_output(text: str) -> list[str]:
    lines = [line.rstrip() for line in text.replace("\r\n", "\n").split("\n")]
    while lines and not lines[-1]:
        lines.pop()
    return lines


def outputs_match(actual: str, expected: str) -> bool:
    return _normalize_output(actual) == _normalize_output(expected)


@dataclass(frozen=True)
class _Test:
    kind: str  # "io" | "assert"
    stdin: str = ""
    expected: str = ""
    snippet: str = ""


def _parse_tests(tests: object) -> list[_Test]:
    if tests is None:
        return []
    if isinstance(tests, str):
        return [_Test("assert", snippet=tests)] if tests.strip() else []
    if isinstance(tests, dict):  # APPS style {"inputs": [...], "outputs": [...]}
        inputs, outputs = tests.get("inputs"), tests.get("outputs")
        if not isinstance(inputs, list) or not isinstance(outputs, list) or len(inputs) != len(outputs):
            raise ValueError("tests dict needs equally long 'inputs' and 'outputs' lists")
        return [_Test("io", stdin=str(i), expected=str(o)) for i, o in zip(inputs, outputs, strict=True)]
    if isinstance(tests, (list, tuple)):
        out = []
        for t in tests:
            if isinstance(t, str):
                out.append(_Test("assert", snippet=t))
            elif isinstance(t, dict) and "output" in t:
                out.append(_Test("io", stdin=str(t.get("input", "")), expected=str(t["output"])))
            else:
                raise ValueError(f"unsupported test entry: {t!r:.100}")
        return out
    raise ValueError(f"unsupported tests value of type {type(tests).__name__}")


class CodeTestsReward:
    """Runs each response's program against its row's ``metadata["tests"]`` in a sandbox (parallel)."""

    def __init__(
        self,
        mode: str = "fraction",
        limits: SandboxLimits | None = None,
        max_workers: int | None = None,
        isolation: str = "auto",
        python: str | None = None,
    ) -> None:
        if mode not in ("fraction", "all_pass"):
            raise ValueError(f"mode must be 'fraction' or 'all_pass', got {mode!r}")
        self.mode = mode
        self.limits = limits or SandboxLimits(cpu_seconds=5, wall_seconds=10)
        self.sandbox = CodeSandbox(
            max_workers=max_workers, limits=self.limits, isolation=isolation, python=python
        )

    def score(
        self, prompts: Sequence[str], responses: Sequence[str], metadata: Sequence[dict]
    ) -> RewardOutput:
        n = len(responses)
        if len(metadata) != n:
            raise ValueError(f"{len(metadata)} metadata rows for {n} responses")
        jobs: list[SandboxJob] = []
        owners: list[tuple[int, _Test]] = []
        n_tests = [0] * n
        bad_row = [False] * n
        for i, (response, meta) in enumerate(zip(responses, metadata, strict=True)):
            try:
                tests = _parse_tests((meta or {}).get("tests"))
                program = extract_program(response or "")
            except Exception:  # noqa: BLE001 - a malformed row scores 0, it does not stop training
                bad_row[i] = True
                continue
            n_tests[i] = len(tests)
            for t in tests:
                code = program if t.kind == "io" else f"{program}\n\n{t.snippet}\n"
                jobs.append(SandboxJob(code=code, stdin=t.stdin))
                owners.append((i, t))
        results = self.sandbox.run_many(jobs)

        passed = [0] * n
        errored = [False] * n
        for (i, test), res in zip(owners, results, strict=True):
            if self._passed(test, res):
                passed[i] += 1
            if res.killed_reason is not None or res.error is not None:
                errored[i] = True
        fractions = [passed[i] / n_tests[i] if n_tests[i] else 0.0 for i in range(n)]
        if self.mode == "fraction":
            scores = list(fractions)
        else:
            scores = [1.0 if n_tests[i] and passed[i] == n_tests[i] else 0.0 for i in range(n)]
        return RewardOutput(
            scores=scores,
            components={
                "pass_fraction": fractions,
                "sandbox_error": [1.0 if errored[i] or bad_row[i] else 0.0 for i in range(n)],
            },
        )

    @staticmethod
    def _passed(test: _Test, res: SandboxResult) -> bool:
        if not res.ok:
            return False
        if test.kind == "assert":
            return True
        return not res.output_truncated and outputs_match(res.stdout, test.expected)


REWARDS.register("code_tests")(CodeTestsReward)
