"""Load any causal LM and its tokenizer the way transformers does (local path or HF cache)."""

from __future__ import annotations

from pathlib import Path

import torch
from transformers import AutoModelForCausalLM, AutoTokenizer, PreTrainedTokenizerBase

from rlxf.models.tiny import TINY_VARIANTS, build_tiny_model

# A model path of this form builds (once) and uses the local tiny model: no download.
TINY_PREFIX = "tiny:"

DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}


def resolve_model_path(path: str, work_dir: str | Path = ".cache/models") -> str:
    """``tiny:NAME`` -> a local tiny model folder (built on first use); anything else is passed through."""
    if path.startswith(TINY_PREFIX):
        name = path[len(TINY_PREFIX):] or "default"
        if name not in TINY_VARIANTS:
            raise ValueError(f"model.path {path!r}: unknown tiny model; known: {', '.join(TINY_VARIANTS)}")
        return str(build_tiny_model(Path(work_dir) / f"tiny-{name}", **TINY_VARIANTS[name]))
    return path


def load_tokenizer(path: str) -> PreTrainedTokenizerBase:
    tokenizer = AutoTokenizer.from_pretrained(path)
    if tokenizer.pad_token_id is None:
        tokenizer.pad_token = tokenizer.eos_token
    tokenizer.padding_side = "left"
    return tokenizer


def load_causal_lm(path: str, dtype: str = "float32", device: str = "cpu") -> torch.nn.Module:
    model = AutoModelForCausalLM.from_pretrained(path, dtype=DTYPES[dtype])
    return model.to(device)
