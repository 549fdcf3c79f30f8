"""A campaign sampled from a checkpoint: rlxf's own engine writes ``n`` responses per prompt, and every
two distinct responses to one prompt make a pair (a prompt whose samples all agree gives none).

The checkpoint is any folder ``rlxf.models.loading`` loads (a run's ``checkpoints/step_N/policy``, a
local HF model); the prompts are a prompt file (``{prompt}`` / ``{messages}`` rows, JSONL or Parquet).
The sampling parameters are stored with the campaign, so every label carries them.
"""

from __future__ import annotations

from dataclasses import asdict
from itertools import combinations

import torch

from rlxf.data.files import read_rows
from rlxf.data.prompt_tokens import render_prompt
from rlxf.rollout.sampling import SamplingParams
from rlxf.studio.limits import InputError


def sample_pairs(checkpoint: str, prompt_rows: list[dict], params: SamplingParams, seed: int = 0,
                 chat_template: bool = False, max_pairs_per_prompt: int = 1) -> list[tuple[dict, str, str]]:
    """(prompt row, first, second) pairs from ``params.n`` samples per prompt (``params.n`` >= 2)."""
    from rlxf.models.loading import load_causal_lm, load_tokenizer
    from rlxf.rollout.engine import build_engine

    if params.n < 2:
        raise InputError(f"sampling a campaign needs n >= 2 responses per prompt, got {params.n}")
    tokenizer = load_tokenizer(checkpoint)
    model = load_causal_lm(checkpoint).eval().requires_grad_(False)
    engine = build_engine("torch", model, tokenizer.eos_token_id, tokenizer.pad_token_id)
    use_template = chat_template and tokenizer.chat_template is not None
    ids = tokenizer([render_prompt(r, tokenizer, use_template) for r in prompt_rows],
                    add_special_tokens=False)["input_ids"]
    generator = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        gen = engine.generate(ids, params, generator)
    texts = tokenizer.batch_decode(gen.response_ids * gen.response_mask, skip_special_tokens=True)
    pairs = []
    for index, row in enumerate(prompt_rows):
        samples = list(dict.fromkeys(texts[index * params.n: (index + 1) * params.n]))
        pairs += [(row, a, b) for a, b in list(combinations(samples, 2))[:max_pairs_per_prompt]]
    return pairs


def sample_campaign_pairs(checkpoint: str, prompts_path: str, params: SamplingParams, limit: int,
                          seed: int = 0) -> tuple[list[tuple[dict, str, str]], dict]:
    """Pairs from the first ``limit`` prompts of ``prompts_path``, and the sampling record to store."""
    rows = read_rows(prompts_path)[:limit]
    pairs = sample_pairs(checkpoint, rows, params, seed)
    if not pairs:
        raise InputError(f"{checkpoint}: every prompt's {params.n} samples were identical; raise the temperature")
    return pairs, {**asdict(params), "seed": seed, "prompts": prompts_path}
