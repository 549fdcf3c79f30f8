"""A task whose response lengths have a long tail: write a two-digit pattern ``k`` times (``37x3=`` -> ``373737``).

Most counts are short (``1..short_max``); a fraction ``long_fraction`` of the rows ask for
``long_min..long_max`` repeats, so a batch of responses is mostly a few tokens long with a few much
longer ones: the length profile that stalls a synchronous step on its longest response
(``benchmarks/async_vs_sync.py``). The answer is a number, so the ``arithmetic`` reward scores it.

The held-out split is a seeded set of (pattern, count) pairs never trained on, drawn with the same
short/long mix. ``sft_target`` comes from a teacher that miscounts: with ``sloppy_teacher=p`` a
fraction ``p`` of the long demonstrations are off by 1 to 2 repeats, so RL against the exact count
has something to fix.

With ``ramble=q`` a fraction ``q`` of all demonstrations do not stop after the answer but "check" it,
listing the pattern ``ramble_repeats`` times (``373737 check:37,37,37,...``, 3 tokens a repeat): the
fine-tuned model then runs on in about that fraction of its *samples*, whatever the prompt, so a
group of ``n`` responses is mostly a few tokens long with a few ~30x longer (a reasoning model that
sometimes double-checks at length). The answer still comes first, so the ``arithmetic`` reward
scores it correct and only withholds the format bonus: RL trains the habit away slowly, and the tail
stays through a benchmark.
"""

from __future__ import annotations

import random

from rlxf.data.tasks import TASKS, TaskSplits


def repeat_row(pattern: int, count: int, target_count: int | None = None, check: int = 0) -> dict:
    target = str(pattern) * (count if target_count is None else target_count)
    if check:
        target += " check:" + ",".join([str(pattern)] * check)
    return {"prompt": f"{pattern}x{count}=", "answer": str(pattern) * count, "sft_target": target}


@TASKS.register("repeat")
def repeat_task(
    seed: int, eval_size: int, train_size: int = 8192, short_max: int = 3, long_min: int = 12,
    long_max: int = 24, long_fraction: float = 0.125, sloppy_teacher: float = 0.0, ramble: float = 0.0,
    ramble_repeats: int = 60,
) -> TaskSplits:
    fractions = (long_fraction, sloppy_teacher, ramble)
    if not (1 <= short_max < long_min <= long_max and all(0.0 <= f <= 1.0 for f in fractions) and ramble_repeats >= 1):
        raise ValueError("repeat task: need 1 <= short_max < long_min <= long_max, long_fraction, "
                         "sloppy_teacher and ramble in [0, 1], ramble_repeats >= 1")
    rng = random.Random(seed)
    patterns = range(10, 100)
    short = [(p, k) for p in patterns for k in range(1, short_max + 1)]
    long = [(p, k) for p in patterns for k in range(long_min, long_max + 1)]
    eval_long = round(eval_size * long_fraction)
    if eval_size - eval_long >= len(short) or eval_long >= len(long):
        raise ValueError(f"repeat task: eval_size {eval_size} leaves no training problems")
    held_out = set(rng.sample(short, eval_size - eval_long)) | set(rng.sample(long, eval_long))
    short = [p for p in short if p not in held_out]
    long = [p for p in long if p not in held_out]
    train = []
    for _ in range(train_size):
        is_long = rng.random() < long_fraction
        digit, count = rng.choice(long if is_long else short)
        miscount = is_long and rng.random() < sloppy_teacher
        target = count + rng.choice((-2, -1, 1, 2)) if miscount else None
        check = ramble_repeats if ramble and rng.random() < ramble else 0  # drawn only when on: ramble=0 keeps the rows
        train.append(repeat_row(digit, count, target, check))
    evals = [repeat_row(d, k) for d, k in sorted(held_out)]
    return TaskSplits(train=train, eval=evals)
