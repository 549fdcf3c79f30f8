"""Build a tiny Llama-architecture model and its character tokenizer locally, saved with save_pretrained.

The default recipe and the tests use it: nothing is downloaded. About 3.2M parameters at the defaults
(hidden 256, 4 layers), the size FIELD.md measured on this kind of machine.
"""

from __future__ import annotations

from pathlib import Path

import torch
from transformers import LlamaConfig, LlamaForCausalLM

from rlxf.disk_space import check_free_space
from rlxf.models.cache_writes import cache_write, staging_folder
from rlxf.models.char_tokenizer import build_char_tokenizer
from rlxf.models.saving import TOKENIZER_BYTES, save_model, weight_bytes


def tiny_llama_config(
    vocab_size: int, hidden_size: int = 256, num_layers: int = 4, num_heads: int = 4,
    intermediate_size: int = 688, max_position_embeddings: int = 256,
) -> LlamaConfig:
    return LlamaConfig(
        vocab_size=vocab_size,
        hidden_size=hidden_size,
        intermediate_size=intermediate_size,
        num_hidden_layers=num_layers,
        num_attention_heads=num_heads,
        num_key_value_heads=num_heads,
        max_position_embeddings=max_position_embeddings,
        rms_norm_eps=1e-5,
        tie_word_embeddings=True,
        pad_token_id=0,
        bos_token_id=1,
        eos_token_id=2,
    )


# ``tiny:NAME`` variants (model.path): the default fits the arithmetic tasks; ``long`` holds programs
# (HumanEval prompts are up to ~1,500 characters, one token each).
TINY_VARIANTS: dict[str, dict] = {"default": {}, "long": {"max_position_embeddings": 4096}}


def build_tiny_model(
    out_dir: str | Path, seed: int = 0, hidden_size: int = 256, num_layers: int = 4,
    num_heads: int = 4, intermediate_size: int = 688, max_position_embeddings: int = 256,
) -> Path:
    """Create a randomly initialised tiny Llama + char tokenizer in ``out_dir`` (idempotent). The folder
    is written under a temporary name and renamed into place, so runs sharing a cache folder never
    read a half-written model (the first rename wins; the others discard their copy). A write that
    fails, or a disk without room for it, is one ``rlxf:`` line (models/cache_writes.py)."""
    out_dir = Path(out_dir)
    if (out_dir / "config.json").exists() and (out_dir / "tokenizer.json").exists():
        return out_dir
    tokenizer = build_char_tokenizer()
    config = tiny_llama_config(
        len(tokenizer), hidden_size, num_layers, num_heads, intermediate_size, max_position_embeddings
    )
    torch.manual_seed(seed)
    model = LlamaForCausalLM(config)
    what = f"the tiny model {out_dir.name}"
    check_free_space(out_dir.parent, weight_bytes(model) + TOKENIZER_BYTES, what)
    with staging_folder(out_dir, what) as staging:
        with cache_write(f"writing the weights of {what} to {staging}"):
            save_model(model, staging)
        with cache_write(f"writing the tokenizer files of {what} to {staging}"):
            tokenizer.save_pretrained(staging)
        try:
            staging.rename(out_dir)
        except OSError:  # built meanwhile by another process (or a leftover folder): keep that one
            if not (out_dir / "config.json").exists():
                raise
    return out_dir

