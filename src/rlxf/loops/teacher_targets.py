"""The SFT warm-up on a teacher's answers (``sft.targets: teacher``): sequence-level knowledge distillation.

A student cut from its teacher (``model.path: layers:SPEC:SOURCE``) or any smaller model of the same tokenizer
may start far from the teacher's answers; on-policy distillation then scores tokens the teacher would never
write, and its per-token reverse KL is large and uninformative (measured in docs/rewards.md: the student only
got worse). Imitating the teacher's own answers first puts the student where the teacher's scores mean
something, as the field's recipes do (off-policy, then on-policy distillation). The answers are the teacher's
greedy ones to the warm-up's prompts (the first ``sft.steps x sft.batch_size`` training rows, or all of them
when there are fewer), in the rollout's budget, generated once on the built-in engine, then the teacher is let go.
"""

from __future__ import annotations

import time
from collections.abc import Callable

import torch

from rlxf.config import Config
from rlxf.data.prompt_tokens import encode_prompts
from rlxf.loops.setup import RunContext
from rlxf.loops.teacher import load_teacher
from rlxf.models.special_tokens import stop_token_ids
from rlxf.rollout.engine import build_engine
from rlxf.rollout.sampling import SamplingParams

GENERATION_BATCH = 64  # prompts a teacher generate() call answers at once


def teacher_sft_rows(config: Config, context: RunContext, write: Callable[[str], None]) -> list[dict]:
    """The warm-up's training rows with the teacher's greedy answer as each ``sft_target``."""
    rows = context.task.train[: config.sft.steps * config.sft.batch_size]
    started = time.time()
    teacher = load_teacher(config, context).eval().requires_grad_(False)
    tokenizer = context.tokenizer
    stops = stop_token_ids(tokenizer, teacher)
    engine = build_engine("torch", teacher, stops, tokenizer.pad_token_id)
    prompts = encode_prompts(rows, tokenizer, config.data.chat_template, config.data.max_prompt_tokens)
    params = SamplingParams(n=1, temperature=0.0, max_new_tokens=config.rollout.max_new_tokens)
    answers: list[str] = []
    with torch.no_grad():
        for start in range(0, len(prompts), GENERATION_BATCH):
            gen = engine.generate(prompts[start:start + GENERATION_BATCH], params)
            # the stop tokens are special tokens: dropped here, as the rollout role decodes responses
            answers += tokenizer.batch_decode(gen.response_ids * gen.response_mask, skip_special_tokens=True)
    write(f"SFT targets: the teacher's greedy answers to {len(rows)} prompts ({time.time() - started:.0f} s)")
    return [{**row, "sft_target": answer} for row, answer in zip(rows, answers)]

