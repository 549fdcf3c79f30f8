"""Judge training as an ordinary task: the policy is the judge of ``a+b=c`` claims from the arithmetic task.

    data:
      task: arithmetic_judge
      task_args: {form: pointwise, digits: 3, b_digits: 1, sloppy_teacher: 0.7}

A pointwise prompt shows one claimed sum (``check 347+8=355``), a pairwise prompt two candidates
(``compare 347+8= A:355 B:345``). The judge answers with a rationale that works through the digits from
the right (``7+8=15 4+0+1=5 3+0=3 sum 355``), copies the claim beside its sum (``vs 345``: a tiny model
compares neighbours far more easily than distant tokens), then gives its verdict in the format the ``judge`` reward parses
(``Score: 1`` / ``Score: 0``; ``[[A]]`` / ``[[B]]`` / ``[[tie]]``). Wrong candidates are mostly the sum of
a teacher that forgets carries (the hard case), else the true sum with one digit changed. Both numbers
wrong makes a pairwise tie.

``label`` is the true verdict (what ``judge_agreement`` rewards). ``sft_target`` is the rationale and
verdict SFT imitates; with ``sloppy_teacher=p`` a seeded fraction ``p`` of the training problems that
carry are demonstrated by a teacher that forgets carries in its rationale and so often judges wrongly,
and RL against the labels has something to fix (as in the default recipe). The split into train and
held-out problems is the arithmetic task's own, so the judge is never evaluated on a trained problem. The
held-out pairwise split holds every pair in both orders (``pair``, ``order``) to measure position bias.
"""

from __future__ import annotations

import random
from collections.abc import Callable
from functools import partial

from rlxf.data.arithmetic import add_without_carry, addends, arithmetic_task
from rlxf.data.tasks import TASKS, TaskSplits
from rlxf.data.wrong_answers import one_digit_off_by_one, units_off

HARD_NEGATIVE_SHARE = 0.7  # of the wrong candidates of carrying problems: the forgotten-carry sum


def digit_rationale(a: int, b: int, forget_carries: bool = False) -> tuple[str, int]:
    """The column-by-column working of ``a+b`` from the right, and the sum it arrives at."""
    columns, total, place, carry = [], 0, 1, 0
    while a or b or carry or not columns:
        x, y = a % 10, b % 10
        column = x + y + carry
        columns.append(f"{x}+{y}" + ("+1" if carry else "") + f"={column}")
        total += (column % 10) * place
        carry = 0 if forget_carries else column // 10
        a, b, place = a // 10, b // 10, place * 10
    return " ".join(columns) + f" sum {total}", total


def sum_rationale(a: int, b: int, forget_carries: bool = False) -> tuple[str, int]:
    """Only the sum (``sum 355``): the skill the default recipe's policy already learns, in 8 characters."""
    total = add_without_carry(a, b) if forget_carries else a + b
    return f"sum {total}", total


def copied_claims(claims: list[int]) -> str:
    """The claims copied beside the judge's own sum (``vs 355``, ``vs A:345 B:355``): a tiny model compares
    neighbours far more easily than distant tokens."""
    return f"vs {claims[0]}" if len(claims) == 1 else "vs " + " ".join(f"{n}:{c}" for n, c in zip("AB", claims))


def marked_columns(mine: str, claims: list[str]) -> str:
    """Digit by digit: the judge's digit, then for each claim ``=`` or ``!`` (same or different) and the
    claim's digit (``_`` past the shorter number's end), so each comparison is between neighbours and the
    verdict is "no ``!``": ``345`` against ``355`` is ``3=3 4!5 5=5``."""
    width = max(map(len, [mine, *claims]))
    mine, *claims = (n.ljust(width, "_") for n in [mine, *claims])
    return " ".join(mine[i] + "".join(("=" if c[i] == mine[i] else "!") + c[i] for c in claims) for i in range(width))


def aligned_rationale(a: int, b: int, claims: list[int], forget_carries: bool = False) -> tuple[str, int]:
    """From the right, one column at a time (``347+8=345``: ``5=5 5!4 3=3``). Every step is local, but the
    claim's digit sits beside the judge's own, and a tiny judge learns to copy it (measured: it then
    accepts every claim)."""
    believed = add_without_carry(a, b) if forget_carries else a + b
    return marked_columns(str(believed)[::-1], [str(c)[::-1] for c in claims]), believed


def sum_then_columns(a: int, b: int, claims: list[int], forget_carries: bool = False) -> tuple[str, int]:
    """The sum first, as the default recipe's policy writes it, then digit by digit from the left against
    each claim: ``sum 345 vs 3=3 4!5 5=5``."""
    text, believed = sum_rationale(a, b, forget_carries)
    return f"{text} vs {marked_columns(str(believed), [str(c) for c in claims])}", believed


def echo_until_mismatch(mine: str, claim: str) -> str:
    """The claim's digits as long as they agree with the judge's own, then ``!`` and the judge's digit where
    they first differ (``_``: its number has ended): ``355`` against ``345`` is ``3!5``, agreement is
    ``355=``. Each character needs only what sits at its own position: the claim's next digit (a copy) and
    the sum's next digit given the digits so far (the default recipe's policy skill, same prefix)."""
    agree = 0
    while agree < min(len(mine), len(claim)) and mine[agree] == claim[agree]:
        agree += 1
    if agree == len(mine) == len(claim):
        return claim + "="
    return claim[:agree] + "!" + (mine[agree] if agree < len(mine) else "_")


def echo_rationale(a: int, b: int, claims: list[int], forget_carries: bool = False, units_first: bool = False,
                   ) -> tuple[str, int]:
    """``echo_until_mismatch`` for each claim (pairwise: ``A 3!5 B 355=``). ``units_first``: both numbers read
    from the right (``347+8=345`` -> ``5!5``, ``=355`` -> ``553=``), the order in which a sum's digits follow
    from the operands (the carry moves left), which small transformers learn addition in far more easily
    (Lee et al. 2023, reversed outputs); the units digit, which the left-to-right echo barely checks, comes first."""
    believed = add_without_carry(a, b) if forget_carries else a + b
    order = (lambda n: str(n)[::-1]) if units_first else str
    echoes = [echo_until_mismatch(order(believed), order(c)) for c in claims]
    return echoes[0] if len(claims) == 1 else " ".join(f"{n} {e}" for n, e in zip("AB", echoes)), believed


def sum_then_echo(a: int, b: int, claims: list[int], forget_carries: bool = False, units_first: bool = False,
                  ) -> tuple[str, int]:
    """The sum first, then the echo of each claim against that written sum (``sum 355 vs 3!5``): the arithmetic
    happens before the claim is read back, and the echo compares two numbers that are both in view.
    ``units_first``: the sum and the echo from the right (``sum 553 vs 5!5``), the order in which the digits
    follow from the operands, while copying the claim backwards is harder than working the sum out."""
    believed = add_without_carry(a, b) if forget_carries else a + b
    mine = str(believed)[::-1] if units_first else str(believed)
    return f"sum {mine} vs {echo_rationale(a, b, claims, forget_carries, units_first)[0]}", believed


def working_then_copy(working: Callable[[int, int, bool], tuple[str, int]]):
    def rationale(a: int, b: int, claims: list[int], forget_carries: bool = False) -> tuple[str, int]:
        text, believed = working(a, b, forget_carries)
        return f"{text} {copied_claims(claims)}", believed
    return rationale


# ``rationale`` task arg: how the judge works out the sum and sets it against the claims before its verdict.
RATIONALES: dict[str, Callable[[int, int, list[int], bool], tuple[str, int]]] = {
    "columns": working_then_copy(digit_rationale), "sum": working_then_copy(sum_rationale), "aligned": aligned_rationale,
    "sum_columns": sum_then_columns, "echo": echo_rationale, "echo_right": partial(echo_rationale, units_first=True),
    "sum_echo": sum_then_echo, "sum_echo_right": partial(sum_then_echo, units_first=True),
}


def wrong_candidate(a: int, b: int, rng: random.Random) -> int:
    """A wrong sum: the forgotten-carry one where it differs (mostly), else one digit of the truth changed."""
    truth, sloppy = a + b, add_without_carry(a, b)
    if sloppy != truth and rng.random() < HARD_NEGATIVE_SHARE:
        return sloppy
    digits = list(str(truth))
    position = rng.randrange(len(digits))
    digits[position] = rng.choice([d for d in "0123456789" if d != digits[position]])
    return int("".join(digits))


def pointwise_rows(
    a: int, b: int, rng: random.Random, sloppy: bool, both_orders: bool, rationale_of=RATIONALES["columns"],
    protocol=None,
) -> list[dict]:
    claim = a + b if rng.random() < 0.5 else wrong_candidate(a, b, rng)
    return [claim_row(a, b, claim, sloppy, rationale_of, protocol)]


def pairwise_verdict(first: int, second: int, truth: int) -> str:
    if (first == truth) == (second == truth):
        return "tie"
    return "A" if first == truth else "B"


def pairwise_rows(
    a: int, b: int, rng: random.Random, sloppy: bool, both_orders: bool, rationale_of=RATIONALES["columns"],
    protocol=None, tie_fraction: float = 0.2,
) -> list[dict]:
    wrong = wrong_candidate(a, b, rng)
    other = a + b
    if rng.random() < tie_fraction:
        other = next(c for c in (wrong_candidate(a, b, rng) for _ in range(100)) if c != wrong)
    pair = [other, wrong] if rng.random() < 0.5 else [wrong, other]
    orders = [pair, pair[::-1]] if both_orders else [pair]
    rows = []
    for order, (x, y) in enumerate(orders):
        rationale, believed = rationale_of(a, b, [x, y], sloppy)
        shown = f"A:{x} B:{y}"
        rows.append({**(protocol or one_turn)("pairwise", f"{a}+{b}=", shown, believed,
                                             f"{rationale} [[{pairwise_verdict(x, y, believed)}]]"),
                     "form": "pairwise", "label": pairwise_verdict(x, y, a + b), "pair": f"{a}+{b}", "order": order})
    return rows


def claim_row(a: int, b: int, claim: int, sloppy: bool, rationale_of, protocol=None) -> dict:
    rationale, believed = rationale_of(a, b, [claim], sloppy)
    return {**(protocol or one_turn)("pointwise", f"{a}+{b}=", str(claim), believed,
                                     f"{rationale} Score: {int(claim == believed)}"),
            "form": "pointwise", "question": f"{a}+{b}=", "claim": str(claim), "label": int(claim == a + b)}


# How the judge is shown the question and the claims. `one_turn`: all at once (``check 347+8=345``).
# `solve_first`: the question alone, the judge answers it (its own sum, then end of turn), and only then the
# claims, as the `simulated_user` environment's second message (``check 347+8=`` -> ``355</s>`` ->
# ``claim 345`` -> ``3!5 Score: 0``). Shown everything at once, a tiny judge copies the claim's units digit
# instead of adding (measured: it accepts the sum + 1 as often as the truth, and a policy RL'd against it
# learns to write sums off by one); a judge that answers before it reads the claim cannot copy it. The same
# remedy as reference-guided judging for LLM judges anchored by a wrong answer (Zheng et al. 2023, MT-Bench).
#
# What the judge is shown, per protocol and form, in the `judge` reward's terms: {prompt} the question,
# {response} the claims (one turn: a text; solve-first: one text per turn).
SHOWN: dict[str, dict[str, str | list[str]]] = {
    "one_turn": {"pointwise": "check {prompt}{response}\n", "pairwise": "compare {prompt} {response}\n"},
    "solve_first": {"pointwise": ["check {prompt}\n", "claim {response}\n"], "pairwise": ["compare {prompt}\n", "{response}\n"]},
}
# the `judge` reward's rubric for a pointwise judge trained with each protocol (min_score 0, max_score 1)
JUDGE_RUBRICS = {protocol: forms["pointwise"] for protocol, forms in SHOWN.items()}


def one_turn(form: str, question: str, shown: str, believed: int, working: str, eos: str = "</s>") -> dict:
    return {"prompt": SHOWN["one_turn"][form].format(prompt=question, response=shown), "sft_target": working}


def solve_first(form: str, question: str, shown: str, believed: int, working: str, eos: str = "</s>") -> dict:
    ask, show = (turn.format(prompt=question, response=shown) for turn in SHOWN["solve_first"][form])
    return {"prompt": ask, "turns": [{"user": ask}, {"user": show}], "sft_target": f"{believed}{eos}{show}{working}"}


PROTOCOLS: dict[str, Callable[..., dict]] = {"one_turn": one_turn, "solve_first": solve_first}


JUDGE_FORMS: dict[str, Callable[..., list[dict]]] = {"pointwise": pointwise_rows, "pairwise": pairwise_rows}


@TASKS.register("arithmetic_judge")
def arithmetic_judge_task(
    seed: int, eval_size: int, form: str = "pointwise", digits: int = 3, b_digits: int | None = 1,
    sloppy_teacher: float = 0.0, rationale: str = "columns", units_near_miss: float = 0.0, near_miss_share: float = 0.0,
    protocol: str = "one_turn", eos: str = "</s>",
) -> TaskSplits:
    """Training claims only (the held-out rows never change): ``units_near_miss=p`` replaces a seeded fraction
    ``p`` of the pointwise rows by claims of the true sum off by one or two (all wrong: measured, the judge then
    learns to reject more); ``near_miss_share=p`` replaces a fraction ``p`` of the wrong pointwise claims by
    ``one_digit_off_by_one`` ones, so the share of right claims stays one half."""
    if form not in JUDGE_FORMS:
        raise ValueError(f"arithmetic_judge task: unknown form {form!r}; known: {sorted(JUDGE_FORMS)}")
    if protocol not in PROTOCOLS:
        raise ValueError(f"arithmetic_judge task: unknown protocol {protocol!r}; known: {sorted(PROTOCOLS)}")
    shown_as = partial(PROTOCOLS[protocol], eos=eos)
    if rationale not in RATIONALES:
        raise ValueError(f"arithmetic_judge task: unknown rationale {rationale!r}; known: {sorted(RATIONALES)}")
    if not 0.0 <= sloppy_teacher <= 1.0:
        raise ValueError(f"arithmetic_judge task: sloppy_teacher must be in [0, 1], got {sloppy_teacher}")
    problems = arithmetic_task(seed, eval_size, digits=digits, ops="+", b_digits=b_digits)
    make_rows = JUDGE_FORMS[form]
    rng, teacher, near = random.Random(seed + 2), random.Random(seed + 3), random.Random(seed + 4)

    def rows(split: list[dict], train: bool) -> list[dict]:
        out = []
        for problem in split:
            a, b = addends(problem["prompt"])
            carries = add_without_carry(a, b) != a + b
            sloppy = train and carries and teacher.random() < sloppy_teacher
            made = make_rows(a, b, rng, sloppy, both_orders=not train, rationale_of=RATIONALES[rationale],
                             protocol=shown_as)
            if train and form == "pointwise" and near.random() < units_near_miss:
                made = [claim_row(a, b, units_off(a + b, near), sloppy, RATIONALES[rationale], shown_as)]
            elif train and form == "pointwise" and made[0]["label"] == 0 and near_miss_share \
                    and near.random() < near_miss_share:
                made = [claim_row(a, b, one_digit_off_by_one(a + b, near), sloppy, RATIONALES[rationale], shown_as)]
            out += made
        return out

    return TaskSplits(train=rows(problems.train, True), eval=rows(problems.eval, False))
