"""Reward for code generation: the policy's program against its row's tests, in the sandbox, with a
verdict the program cannot forge.

The program runs in a sandboxed process of its own. stdin/stdout tests compare its output in the
trainer's process. Assert and function-call tests run in a *second* sandboxed process, the checker,
which reaches the program's functions only through a channel of plain data: the program never sees a
test or an expected value, and nothing it does to its own process (exit status, interpreter hooks,
objects that claim equality, reading its own source) reaches the checker's decision. See
docs/sandbox.md and ``rewards/code_tests.py`` for the test forms.

A row's ``program_prefix`` (e.g. HumanEval's prompt) is put before the extracted program, for tasks
where the policy completes a function body.

Scores: ``mode="fraction"`` gives the fraction of tests passed, ``mode="all_pass"`` 1.0 only when all
pass. Components: ``pass_fraction`` and ``sandbox_error`` (1.0 when a run of that response was stopped
by a limit, the sandbox or the checker failed, or the row's tests were malformed). Nothing the
candidate does makes ``score`` raise; a malformed row or a response without tests scores 0.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

from rlxf.rewards.base import RewardOutput
from rlxf.rewards.code_tests import checker_spec, parse_tests
from rlxf.rewards.registry import REWARDS
from rlxf.rewards.sandbox import CodeSandbox, SandboxJob
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


class CodeTestsReward:
    """Runs each response's program against its row's tests in the sandbox (in parallel)."""

    def __init__(
        self,
        mode: str = "fraction",
        limits: SandboxLimits | None = None,
        max_workers: int | None = None,
        isolation: str = "auto",
        python: str | None = None,
        allowed_packages: Sequence[str] = (),
    ) -> None:
        if mode not in ("fraction", "all_pass"):
            raise ValueError(f"mode must be 'fraction' or 'all_pass', got {mode!r}")
        self.mode = mode
        self.limits = limits or SandboxLimits(cpu_seconds=5, wall_seconds=10)
        self.sandbox = CodeSandbox(max_workers, self.limits, isolation, python, allowed_packages)

    def score(
        self, prompts: Sequence[str], responses: Sequence[str], metadata: Sequence[dict]
    ) -> RewardOutput:
        n = len(responses)
        if len(metadata) != n:
            raise ValueError(f"{len(metadata)} metadata rows for {n} responses")
        jobs: list[SandboxJob] = []
        owners: list[tuple[int, str | None]] = []  # (row, expected stdout or None for a checked job)
        n_tests = [0] * n
        bad_row = [False] * n
        for i, (response, meta) in enumerate(zip(responses, metadata, strict=True)):
            try:
                meta = meta or {}
                parsed = parse_tests(meta.get("tests"))
                spec = checker_spec(parsed, meta)
                prefix = meta.get("program_prefix") or ""
                if not isinstance(prefix, str):
                    raise ValueError("program_prefix must be text")
                program = prefix + extract_program(response or "")
            except Exception:  # noqa: BLE001 - a malformed row scores 0, it does not stop training
                bad_row[i] = True
                continue
            n_tests[i] = len(parsed)
            for stdin, expected in parsed.io:
                jobs.append(SandboxJob(program, stdin))
                owners.append((i, expected))
            if spec is not None:
                jobs.append(SandboxJob(program, "", checks=spec))
                owners.append((i, None))
        passed = [0] * n
        errored = list(bad_row)
        for (i, expected), (res, report) in zip(owners, self.sandbox.run_many_checked(jobs), strict=True):
            if report is not None:  # function tests: the checker's verdicts are the only evidence
                passed[i] += sum(ok for ok, _ in report.results) if report.error is None else 0
                errored[i] |= report.error is not None or res.error is not None or res.killed_reason not in (
                    None, "signal:SIGKILL")
                continue
            if res.ok and not res.output_truncated and outputs_match(res.stdout, expected):
                passed[i] += 1
            errored[i] |= res.killed_reason is not None or res.error is not None
        fractions = [passed[i] / n_tests[i] if n_tests[i] else 0.0 for i in range(n)]
        if self.mode == "fraction":
            scores = list(fractions)
        else:
            scores = [1.0 if n_tests[i] and passed[i] == n_tests[i] else 0.0 for i in range(n)]
        return RewardOutput(
            scores=scores,
            components={"pass_fraction": fractions, "sandbox_error": [1.0 if e else 0.0 for e in errored]},
        )


REWARDS.register("code_tests")(CodeTestsReward)
