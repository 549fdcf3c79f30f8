"""Decoders: the prefill/step/keep machinery behind rlxf's built-in rollout engine."""

from __future__ import annotations

import copy
import logging

import torch

from rlxf.rollout.decoders.base import Decoder, position_ids_from_mask
from rlxf.rollout.decoders.exact_decoder import ExactDecoder
from rlxf.rollout.decoders.fp32_head import Fp32LMHead
from rlxf.rollout.decoders.hf_decoder import HFDecoder
from rlxf.rollout.decoders.llama_decoder import (
    SUPPORTED_MODEL_TYPES,
    LlamaDecoder,
    check_supported,
    sliding_window,
)

__all__ = [
    "Decoder",
    "ExactDecoder",
    "Fp32LMHead",
    "HFDecoder",
    "LlamaDecoder",
    "SUPPORTED_MODEL_TYPES",
    "make_decoder",
    "position_ids_from_mask",
]

logger = logging.getLogger(__name__)


def make_decoder(
    model, *, prefer: str = "auto", dtype: torch.dtype | None = None, fp32_head: bool = False,
    batch_invariant: bool = False, share_weights: bool = False,
) -> Decoder:
    """LlamaDecoder for supported Llama-family models, HFDecoder otherwise (or when ``prefer="hf"``).

    The choice is made here, up front: a sliding window shorter than the model's context (Mistral)
    means HFDecoder under ``auto`` (transformers' cache applies the window; LlamaDecoder attends to
    the whole sequence and so refuses sequences past the window). ``prefer`` is the torch engine's
    ``rollout.engine_options.decoder``.

    ``dtype`` (default: the model's) is the dtype the decoder computes in. LlamaDecoder holds its own
    weights anyway; HFDecoder shares the model, so a different dtype costs it a copy of the model.

    ``fp32_head`` (``rollout.engine_options.fp32_lm_head``): a decoder computing in a lower precision
    turns its last hidden state into logits with an fp32 copy of the LM head (``fp32_head.py``); an
    fp32 decoder is left as it is.

    ``batch_invariant`` (``rollout.engine_options.batch_invariant``): ``ExactDecoder``, whose logits are
    the trainer's exact log-prob pass's bit for bit; fp32 only, so a ``dtype`` or head option is refused.

    ``share_weights`` (``rollout.engine_options.share_weights``): LlamaDecoder decodes with the model's own
    tensors instead of a fused copy (HFDecoder always does, in the model's dtype)."""
    if prefer not in ("auto", "hf", "llama"):
        raise ValueError(f"prefer must be 'auto', 'hf' or 'llama', got {prefer!r}")
    source_dtype = next(model.parameters()).dtype
    if share_weights and (dtype not in (None, source_dtype) or fp32_head and source_dtype != torch.float32):
        raise ValueError(f"share_weights decodes with the model's own {source_dtype} weights: drop engine_options "
                         "dtype and fp32_lm_head, or share_weights")
    if batch_invariant:
        if share_weights:
            raise ValueError("rollout.engine_options.batch_invariant keeps its own weights: drop share_weights")
        if prefer == "hf" or fp32_head or dtype not in (None, torch.float32):
            raise ValueError("rollout.engine_options.batch_invariant runs its own fp32 decoder: drop "
                             "engine_options decoder=hf, dtype and fp32_lm_head")
        return ExactDecoder(model)
    window = sliding_window(model.config)
    if prefer == "auto" and window is not None and window < getattr(model.config, "max_position_embeddings", window + 1):
        logger.info("make_decoder: sliding_window=%d < context: HFDecoder", window)
        prefer = "hf"
    if prefer != "hf":
        try:
            check_supported(model.config)
            return LlamaDecoder.from_hf(model, dtype=dtype, fp32_head=fp32_head, share_weights=share_weights)
        except (NotImplementedError, KeyError, ValueError) as err:
            if prefer == "llama":
                raise
            logger.info("make_decoder: falling back to HFDecoder (%s)", err)
    head = Fp32LMHead.of(model) if fp32_head and (dtype or source_dtype) != torch.float32 else None
    if dtype is not None and dtype != source_dtype:
        model = copy.deepcopy(model).to(dtype)
    return HFDecoder(model, head)
