"""Wrong answers to ``a + b``: the rejected side of ``arithmetic_preferences``' pairs, by kind.

A reward model learns only what separates its pairs. Trained on the sloppy teacher's mistakes alone (the
no-carry sum, else off by one), it learns the digits those get wrong and scores other answers as it
pleases: GRPO against it found ``487+1=788`` (scored ~9, above the true sum). A policy can be wrong in any
digit and at any length, so ``rejected`` mixes kinds by weight (each row draws one kind):

* ``teacher``: the no-carry sum where it differs, else off by one (the default, and DPO's pairs);
* ``carry``: the carries flipped: the no-carry sum where the sum carries, else a spurious carry into the
  tens (``520+3`` -> ``533``, the mistake GRPO learned against a teacher-only reward model);
* ``digit``: one digit of the true sum changed (any position);
* ``length``: one digit inserted into or dropped from the true sum;
* ``random``: any number with up to one digit more than the true sum;
* ``near``: one digit of the true sum, at any position, one up or down (the judge task's near misses).
"""

from __future__ import annotations

import random

from rlxf.data.arithmetic import add_without_carry
from rlxf.registry import Registry

WRONG_ANSWERS: Registry = Registry("wrong-answer kind")


def _digit_other_than(digit: str, rng: random.Random, leading: bool) -> str:
    return rng.choice([d for d in ("123456789" if leading else "0123456789") if d != digit])


@WRONG_ANSWERS.register("teacher")
def teacher_mistake(a: int, b: int, rng: random.Random) -> str:
    sloppy = add_without_carry(a, b)
    if sloppy != a + b:
        return str(sloppy)
    return str(max(a + b + rng.choice((-1, 1)), 0) if a + b else 1)


@WRONG_ANSWERS.register("carry")
def carry_flipped(a: int, b: int, rng: random.Random) -> str:
    """The sum with its carries flipped: without a carry where there is one (the teacher's no-carry sum),
    with a spurious one into the tens where there is none (``520+3`` -> ``533``)."""
    sloppy = add_without_carry(a, b)
    return str(sloppy if sloppy != a + b else a + b + 10)


@WRONG_ANSWERS.register("digit")
def one_digit_changed(a: int, b: int, rng: random.Random) -> str:
    truth = str(a + b)
    at = rng.randrange(len(truth))
    leading = at == 0 and len(truth) > 1  # no leading zero: "088" is not an answer anyone writes
    return truth[:at] + _digit_other_than(truth[at], rng, leading) + truth[at + 1:]


@WRONG_ANSWERS.register("length")
def one_digit_more_or_less(a: int, b: int, rng: random.Random) -> str:
    truth = str(a + b)
    if len(truth) > 1 and rng.random() < 0.5:  # drop a digit (never leaving a leading zero)
        shorter = [truth[:i] + truth[i + 1:] for i in range(len(truth))]
        return rng.choice([s for s in shorter if s == "0" or not s.startswith("0")])
    at = rng.randrange(len(truth) + 1) if truth != "0" else 0  # "0" -> "07" would lead with a zero
    return truth[:at] + (rng.choice("123456789") if at == 0 else rng.choice("0123456789")) + truth[at:]


@WRONG_ANSWERS.register("random")
def any_number(a: int, b: int, rng: random.Random) -> str:
    truth = a + b
    while True:
        guess = rng.randrange(10 ** (len(str(truth)) + 1))
        if guess != truth:
            return str(guess)


def units_off(truth: int, rng: random.Random) -> int:
    """The true sum off by one or two (floored at 0; never the truth)."""
    claim = max(truth + rng.choice([-2, -1, 1, 2]), 0)
    return claim if claim != truth else truth + 1


def one_digit_off_by_one(truth: int, rng: random.Random) -> int:
    """The true sum with one digit, at a uniformly drawn position, one up or down (``355`` -> ``365``, ``354``;
    9 wraps to 0): a near miss at every position alike, so only a judge that works out each digit rejects it."""
    digits = list(str(truth))
    position = rng.randrange(len(digits))
    steps = [s for s in (1, -1) if not (position == 0 and len(digits) > 1 and (int(digits[0]) + s) % 10 == 0)]
    digits[position] = str((int(digits[position]) + rng.choice(steps)) % 10)
    return int("".join(digits))


@WRONG_ANSWERS.register("near")
def near_miss(a: int, b: int, rng: random.Random) -> str:
    """``one_digit_off_by_one`` of the true sum (the judge task's ``near_miss_share`` claims)."""
    return str(one_digit_off_by_one(a + b, rng))


def wrong_answer_picker(weights: dict[str, float], rng: random.Random):
    """``(a, b) -> wrong answer``, each call drawing a kind by ``weights`` (one kind: no draw, so the
    default ``{teacher: 1}`` gives the same pairs as before kinds existed)."""
    if not weights or any(not isinstance(w, (int, float)) or w <= 0 for w in weights.values()):
        raise ValueError(f"arithmetic_preferences: rejected: give each kind a positive weight, got {weights}")
    try:
        kinds = [WRONG_ANSWERS.get(name) for name in weights]
    except KeyError as error:  # names the known kinds
        raise ValueError(f"arithmetic_preferences: rejected: {error.args[0]}") from None
    if len(kinds) == 1:
        return lambda a, b: kinds[0](a, b, rng)
    return lambda a, b: rng.choices(kinds, weights=list(weights.values()))[0](a, b, rng)
