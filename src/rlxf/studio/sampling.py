"""A campaign sampled from a checkpoint: rlxf's own engine writes ``n`` responses per prompt, and every
two distinct responses to one prompt make a pair (a prompt whose samples all agree gives none).

The checkpoint is any folder ``rlxf.models.loading`` loads (a run's ``checkpoints/step_N/policy``, a
local HF model); the prompts are a prompt file (``{prompt}`` / ``{messages}`` rows, JSONL or Parquet).
The sampling parameters are stored with the campaign, so every label carries them.

An instruct checkpoint answers what it was trained on: a prompt rendered through its chat template. So a
checkpoint whose tokenizer has a template gets it unless the caller says ``chat_template=False`` (a
checkpoint trained on raw prompts, like the tiny arithmetic recipes); the choice is stored with the
campaign. The labeller reads the response as the model wrote it: a special token inside it (a
``<|im_start|>`` the model started a new turn with) stays visible; only the token that ended the sample
(end of sequence / end of turn) and the padding after it are dropped.
"""

from __future__ import annotations

from dataclasses import asdict
from itertools import combinations

import torch

from rlxf.data.files import read_rows
from rlxf.data.prompt_tokens import encode_prompt_lengths
from rlxf.models.shown_text import shown_texts
from rlxf.models.special_tokens import stop_token_ids
from rlxf.rollout.generation import Generation
from rlxf.rollout.sampling import SamplingParams
from rlxf.studio.limits import InputError

# Prompts sampled per engine call. Memory grows with the rows of a call (SmolLM2-135M in fp32 holds ~3.7 MB of
# KV cache a row at 80 positions: 0.9 GB for 32 prompts x 8 samples), so a campaign of thousands of prompts
# goes through in calls of this many, one after another.
PROMPTS_PER_GENERATE = 32


def template_choice(tokenizer, chat_template: bool | None) -> bool:
    """Whether prompts go through the chat template: ``None`` = when the tokenizer has one."""
    has_template = bool(getattr(tokenizer, "chat_template", None))
    if chat_template is None:
        return has_template
    if chat_template and not has_template:
        raise InputError("chat_template=true, but this checkpoint's tokenizer has no chat template")
    return bool(chat_template)


def response_texts(tokenizer, gen: Generation, stop_ids: list[int]) -> list[str]:
    """Each response as the model wrote it, special tokens included (models/shown_text.py), without the stop
    token that ended it.

    ``response_mask`` covers the response up to and including its stop token, so the padding after it is
    already out; the engine stops at the first stop token, so only the last kept token can be one."""
    mask = gen.response_mask.cpu().bool().clone()
    rows = torch.arange(len(mask))
    last = (mask.sum(dim=1) - 1).clamp(min=0)
    ended = mask[rows, last] & torch.isin(gen.response_ids.cpu()[rows, last], torch.tensor(stop_ids))
    mask[rows[ended], last[ended]] = False
    return shown_texts(tokenizer, gen.response_ids, mask)


def sample_pairs(checkpoint: str, prompt_rows: list[dict], params: SamplingParams, seed: int = 0,
                 chat_template: bool | None = None,
                 max_pairs_per_prompt: int = 1) -> tuple[list[tuple[dict, str, str]], bool]:
    """((prompt row, first, second) pairs from ``params.n`` samples per prompt (``params.n`` >= 2), whether
    the prompts went through the chat template)."""
    from rlxf.models.loading import load_causal_lm, load_tokenizer
    from rlxf.rollout.engine import build_engine

    if params.n < 2:
        raise InputError(f"sampling a campaign needs n >= 2 responses per prompt, got {params.n}")
    tokenizer = load_tokenizer(checkpoint)
    use_template = template_choice(tokenizer, chat_template)
    if not tokenizer.chat_template and any("messages" in r for r in prompt_rows):
        raise InputError(f"{checkpoint}: the prompt file has `messages` rows but the tokenizer has no chat template")
    model = load_causal_lm(checkpoint).eval().requires_grad_(False)
    # the same stops as training's rollouts: a chat model's end of turn (<|im_end|>) ends a sample too
    stop_ids = stop_token_ids(tokenizer, model)
    engine = build_engine("torch", model, stop_ids, tokenizer.pad_token_id)
    # the same prompt ids the data pipeline gives the policy (a template writes its own BOS; raw text gets
    # the tokenizer's), so a checkpoint is sampled on the prompts it was trained on
    _, ids = encode_prompt_lengths(prompt_rows, tokenizer, use_template)
    generator = torch.Generator().manual_seed(seed)
    texts: list[str] = []
    with torch.no_grad():  # a bounded number of rows per call: the KV cache and logits grow with them
        for start in range(0, len(ids), PROMPTS_PER_GENERATE):
            gen = engine.generate(ids[start: start + PROMPTS_PER_GENERATE], params, generator)
            texts += response_texts(tokenizer, gen, stop_ids)
    pairs = []
    for index, row in enumerate(prompt_rows):
        samples = list(dict.fromkeys(texts[index * params.n: (index + 1) * params.n]))
        pairs += [(row, a, b) for a, b in list(combinations(samples, 2))[:max_pairs_per_prompt]]
    return pairs, use_template


def sample_campaign_pairs(checkpoint: str, prompts_path: str, params: SamplingParams, limit: int,
                          seed: int = 0, chat_template: bool | None = None) -> tuple[list[tuple[dict, str, str]], dict]:
    """Pairs from the first ``limit`` prompts of ``prompts_path``, and the sampling record to store (with
    ``chat_template``: whether the prompts went through the checkpoint's template)."""
    rows = read_rows(prompts_path)[:limit]
    pairs, use_template = sample_pairs(checkpoint, rows, params, seed, chat_template=chat_template)
    if not pairs:
        raise InputError(f"{checkpoint}: every prompt's {params.n} samples were identical; raise the temperature")
    return pairs, {**asdict(params), "seed": seed, "prompts": prompts_path, "chat_template": use_template}
