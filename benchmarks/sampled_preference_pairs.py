"""Preference pairs from a policy's own samples, labelled by a recipe's reward (a verifier, a judge).

    OMP_NUM_THREADS=1 python benchmarks/sampled_preference_pairs.py recipes/smollm2_grpo.yaml threads=1 \
        --prompts 800 --pairs-per-prompt 2 --out recipes/data/smollm2_sums_pairs.jsonl [key=value ...]

The recipe gives the model, the task, the chat template, the sampling settings (``rollout``) and the reward;
its rollout role samples ``rollout.n_samples`` responses to each of ``--prompts`` prompts drawn at random
(seeded) from the train split (and ``--eval-prompts`` of the held-out split, into ``--eval-out``), as the
recipe's GRPO would at step 1, and its reward scores them. Every two samples of one prompt with different scores make a candidate pair
(the higher score chosen); up to ``--pairs-per-prompt`` of them a prompt, each sample used once where it can
be. A prompt whose samples all score alike gives none.

``--edited-negatives K`` (sums tasks: a prompt holding ``a`` and ``b`` as its first two numbers) adds, for each
chosen response that states the true sum, K pairs of that response against itself with that number (its last
occurrence) replaced by a wrong sum (``rlxf.data.wrong_answers``: the no-carry sum, a flipped carry, a digit
changed, a digit more or less, a random number; kept only where the reward scores it lower): the same words,
only the arithmetic differs, so a reward model trained on them has to read the number. ``--from-pairs`` adds
them to a pairs file already written instead of sampling again (its ``.eval`` file is left as it is).

The rows are ``{prompt, chosen, rejected, answer, scores}``: ``prompt`` is the prompt row's text (the chat
template is applied again when the pairs are trained on with ``data.chat_template: true``), ``chosen`` /
``rejected`` the responses as the reward read them. Prints one JSON object: samples, their mean reward,
pairs written, prompts without a pair, seconds.
"""

from __future__ import annotations

import argparse
import json
import random
import re
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).parent))
from common import emit, operands  # noqa: E402
from rlxf.checked_config import load_config  # noqa: E402
from rlxf.data.wrong_answers import WRONG_ANSWERS, wrong_answer_picker  # noqa: E402
from rlxf.loops.setup import build_run_context, load_policy, make_rollout_role, sampling_params  # noqa: E402


def pairs_of(samples: list[tuple[str, float]], limit: int, rng: random.Random) -> list[tuple[str, str, float, float]]:
    """Up to ``limit`` (chosen, rejected, chosen score, rejected score) pairs of distinct texts with
    different scores, each text in one pair where there are enough of them."""
    distinct = list(dict.fromkeys(samples))
    rng.shuffle(distinct)
    best_first = sorted(distinct, key=lambda s: -s[1])
    pairs, used = [], set()
    for high in best_first:
        for low in reversed(best_first):
            if len(pairs) == limit:
                return pairs
            if low[1] < high[1] and high[0] not in used and low[0] not in used:
                pairs.append((high[0], low[0], high[1], low[1]))
                used |= {high[0], low[0]}
                break
    return pairs


def sample_split(rows: list[dict], context, rollout, params, chunk: int, limit: int, seed: int) -> tuple[list[dict], dict]:
    generator, rng = torch.Generator().manual_seed(seed), random.Random(seed)
    out, rewards, lonely = [], [], 0
    for start in range(0, len(rows), chunk):
        part = rows[start: start + chunk]
        batch = rollout.generate(part, params, generator)
        prompts, responses = rollout.decode_prompts(batch), rollout.decode_responses(batch)
        scores = context.reward.score(prompts, responses, batch.metadata).scores
        rewards += scores
        for index, row in enumerate(part):
            mine = [(responses[i], float(scores[i])) for i in range(len(responses)) if int(batch.group_ids[i]) == index]
            found = pairs_of(mine, limit, rng)
            lonely += not found
            out += [{"prompt": row["prompt"], "chosen": c, "rejected": r, "answer": row.get("answer"),
                     "scores": [sc, sr]} for c, r, sc, sr in found]
    return out, {"samples": len(rewards), "mean_reward": round(sum(rewards) / max(len(rewards), 1), 4),
                 "pairs": len(out), "prompts_without_a_pair": lonely}


def edited_negatives(rows: list[dict], per_pair: int, reward, seed: int) -> list[dict]:
    """``per_pair`` pairs for each distinct chosen response holding its true sum: the response against itself
    with that number replaced by a wrong sum, where ``reward`` scores the edit below the original."""
    pick = wrong_answer_picker({kind: 1.0 for kind in WRONG_ANSWERS.names()}, random.Random(seed))
    out = []
    for row in {(r["prompt"], r["chosen"]): r for r in rows}.values():
        a, b = operands(row["prompt"])
        found = [m for m in re.finditer(r"\d+", row["chosen"]) if m.group() == str(a + b)]
        if not found:
            continue
        where = found[-1]
        wrongs = dict.fromkeys(pick(a, b) for _ in range(per_pair))  # in draw order: the file is reproducible
        for wrong in [w for w in wrongs if w != str(a + b)]:
            edited = row["chosen"][: where.start()] + wrong + row["chosen"][where.end():]
            out.append({**row, "rejected": edited, "edited": True})
    scores = reward.score([r["prompt"] for r in out], [r["rejected"] for r in out], out).scores if out else []
    return [{**r, "scores": [r["scores"][0], s]} for r, s in zip(out, scores) if s < r["scores"][0]]


def write_rows(path: str, rows: list[dict]) -> None:
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    Path(path).write_text("".join(json.dumps(r) + "\n" for r in rows))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("recipe")
    parser.add_argument("overrides", nargs="*", help="key=value, as `rlxf train` takes them")
    parser.add_argument("--prompts", type=int, default=400, help="N train prompts, drawn at random")
    parser.add_argument("--eval-prompts", type=int, default=100, help="N held-out prompts, drawn at random")
    parser.add_argument("--pairs-per-prompt", type=int, default=2)
    parser.add_argument("--chunk", type=int, default=16, help="prompts sampled at once")
    parser.add_argument("--out", required=True)
    parser.add_argument("--eval-out", help="held-out pairs (default: OUT with .eval before .jsonl)")
    parser.add_argument("--edited-negatives", type=int, default=0, help="K edited wrong sums per chosen response")
    parser.add_argument("--from-pairs", help="add --edited-negatives to this pairs file (to OUT) instead of sampling")
    ns = parser.parse_args()
    config = load_config(ns.recipe, ns.overrides)
    context = build_run_context(config)
    if ns.from_pairs:
        rows = [json.loads(line) for line in Path(ns.from_pairs).read_text().splitlines()]
        edited = edited_negatives(rows, ns.edited_negatives, context.reward, config.seed)
        write_rows(ns.out, rows + edited)
        emit({"from": ns.from_pairs, "pairs": len(rows), "edited_pairs": len(edited), "path": ns.out})
        return
    policy = load_policy(config, context.model_path, context.device).eval().requires_grad_(False)
    rollout, params = make_rollout_role(config, policy, context.tokenizer), sampling_params(config)
    eval_out = ns.eval_out or ns.out.removesuffix(".jsonl") + ".eval.jsonl"
    report = {"recipe": ns.recipe, "overrides": ns.overrides, "n_samples": params.n}
    for name, rows, count, path, seed in (("train", context.task.train, ns.prompts, ns.out, config.seed),
                                          ("eval", context.task.eval, ns.eval_prompts, eval_out, config.seed + 1)):
        rows = random.Random(seed).sample(rows, min(count, len(rows)))  # a task's split may be in order
        began = time.perf_counter()
        with torch.no_grad():
            pairs, stats = sample_split(rows, context, rollout, params, ns.chunk, ns.pairs_per_prompt, seed)
        if name == "train" and ns.edited_negatives:
            pairs += (edited := edited_negatives(pairs, ns.edited_negatives, context.reward, seed))
            stats["edited_pairs"] = len(edited)
        write_rows(path, pairs)
        report[name] = {**stats, "path": path, "seconds": round(time.perf_counter() - began, 1)}
        print(json.dumps({name: report[name]}), file=sys.stderr, flush=True)
    emit(report)


if __name__ == "__main__":
    main()
