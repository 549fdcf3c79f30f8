"""Arithmetic the policy cannot do in its head (e.g. 3-digit multiplication), with a calculator to call.

Rows as in the arithmetic task (``prompt`` ``347*582=``, or ``question`` in words as there, ``answer``).
``sft_target`` demonstrates a transcript of the ``tool_use`` environment for a seeded fraction
``tool_demo_fraction`` of the training rows (``@calc(347*582)</s>=201954\\n201954``: the call, end of turn,
the tool's observation, the answer) and a direct answer for the rest, so SFT teaches both formats and RL
decides which pays. ``eos`` and ``observation`` must be what the run's model and environment write: a chat
model's end of turn and the environment's ``observation`` (envs/tool_use.py).
"""

from __future__ import annotations

import random

from rlxf.data.arithmetic import OPERATORS, arithmetic_row, check_question
from rlxf.data.tasks import TASKS, TaskSplits, check_rows_in_memory, task_check

# What the tool_use environment sends back after a call (its ``observation`` default; envs/tool_use.py): kept
# here, below the environments, so that demonstrations and the environment write the same text.
OBSERVATION = "={result}\n"


def check_observation(observation: str, setting: str) -> None:
    """An observation format must say where the tool's output goes; ``setting`` names the key that set it."""
    if "{result}" not in observation:
        raise ValueError(f"{setting}={observation!r} must hold {{result}} (where the tool's output goes)")


def tool_observation(observation: str, result: str) -> str:
    """The text after a call: ``observation`` with the tool's output (not format(): a result may hold braces)."""
    return observation.replace("{result}", result)


def tool_demo(prompt_expr: str, answer: str, tool: str, eos: str, observation: str = OBSERVATION) -> str:
    return f"@{tool}({prompt_expr}){eos}{tool_observation(observation, answer)}{answer}"


@task_check("tool_arithmetic")
def check_tool_arithmetic_args(eval_size: int, digits: int = 3, ops: str = "*", size: int = 20000,
                               tool_demo_fraction: float = 0.2, question: str | None = None,
                               observation: str = OBSERVATION, **_) -> None:
    """What ``tool_arithmetic_task`` cannot build, named by its ``data.task_args`` key."""
    if not ops or set(ops) - set(OPERATORS):
        raise ValueError(f"data.task_args.ops={ops!r}: unknown operators; known: {''.join(OPERATORS)}")
    if digits < 1 or size < 1:
        raise ValueError(f"data.task_args.{'digits' if digits < 1 else 'size'}: must be 1 or more")
    if not 0.0 <= tool_demo_fraction <= 1.0:
        raise ValueError(f"data.task_args.tool_demo_fraction={tool_demo_fraction}: must be in [0, 1]")
    if question is not None:
        check_question(question)
    check_observation(observation, "data.task_args.observation")
    check_rows_in_memory(size + eval_size, f"data.task_args.size={size} with data.eval_size={eval_size}")
    distinct = len(set(ops)) * (10**digits - 10 ** (digits - 1)) ** 2
    if eval_size >= distinct:
        raise ValueError(f"data.eval_size={eval_size} holds out all {distinct} problems of data.task_args.digits="
                         f"{digits}: none would be left to train on; lower data.eval_size or raise the digits")


@TASKS.register("tool_arithmetic")
def tool_arithmetic_task(
    seed: int, eval_size: int, digits: int = 3, ops: str = "*", size: int = 20000,
    tool_demo_fraction: float = 0.2, tool: str = "calc", eos: str = "</s>", question: str | None = None,
    observation: str = OBSERVATION,
) -> TaskSplits:
    check_tool_arithmetic_args(eval_size, digits, ops, size, tool_demo_fraction, question, observation)
    rng = random.Random(seed)
    lo, hi = 10 ** (digits - 1), 10**digits - 1
    problems = {(rng.randint(lo, hi), rng.choice(ops), rng.randint(lo, hi)) for _ in range(size + eval_size)}
    ordered = sorted(problems)
    rng.shuffle(ordered)
    rows = []
    for i, (a, op, b) in enumerate(ordered):
        expr, answer = f"{a}{op}{b}", str(OPERATORS[op](a, b))
        demo = i >= eval_size and rng.random() < tool_demo_fraction
        rows.append({"prompt": arithmetic_row(a, op, b, question=question)["prompt"], "answer": answer,
                     "sft_target": tool_demo(expr, answer, tool, eos, observation) if demo else answer})
    return TaskSplits(train=rows[eval_size:], eval=rows[:eval_size])
