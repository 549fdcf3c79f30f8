"""Generic decoder over any transformers causal LM, using its own forward and a DynamicCache."""

from __future__ import annotations

import inspect

import torch
from torch import Tensor

from rlxf.rollout.decoders.base import as_row_index as _as_rows
from rlxf.rollout.decoders.base import position_ids_from_mask
from rlxf.rollout.decoders.eval_mode import eval_mode
from rlxf.rollout.decoders.fp32_head import Fp32LMHead

__all__ = ["HFDecoder"]


def _new_dynamic_cache(config):
    from transformers import DynamicCache

    try:
        return DynamicCache(config=config)  # transformers 5.x: per-layer types (sliding window etc.)
    except TypeError:  # transformers 4.x
        return DynamicCache()


class HFDecoder:
    """Fallback decoder for ANY ``*ForCausalLM``. Shares the model object (no weight copy).

    ``fp32_head`` (``fp32_head.py``): the model's decoder runs alone and this head turns its last hidden
    state into fp32 logits (the model's own head is then never called)."""

    def __init__(self, model: torch.nn.Module, fp32_head: Fp32LMHead | None = None):
        self.model = model
        self.fp32_head = fp32_head
        self._body = model
        if fp32_head is not None:
            self._body = model.get_decoder() if hasattr(model, "get_decoder") else None
            if self._body is None or self._body is model:
                raise ValueError(f"rollout.engine_options.fp32_lm_head: {type(model).__name__} has no separate "
                                 "decoder (get_decoder()) to take hidden states from")
        try:
            params = inspect.signature(self._body.forward).parameters
        except (TypeError, ValueError):
            params = {}
        self._logits_to_keep = "logits_to_keep" in params
        # transformers >= 5.2x renamed ``past_key_values`` to ``cache`` (the old name warns, then goes away)
        self._cache_kw = "cache" if "cache" in params else "past_key_values"
        self._cache = None
        self._mask: Tensor | None = None  # [B, P + max_new] (ones beyond the prompt), sliced per step
        self._pos: Tensor | None = None  # [B] position id of the next token
        self._cur = 0  # number of cache slots filled

    @property
    def device(self) -> torch.device:
        return next(self.model.parameters()).device

    def _forward(self, input_ids: Tensor, attention_mask: Tensor, position_ids: Tensor) -> Tensor:
        kwargs = {"logits_to_keep": 1} if self._logits_to_keep else {}
        kwargs[self._cache_kw] = self._cache
        with eval_mode(self.model):  # the trainer may have left the shared model training: no dropout
            out = self._body(
                input_ids=input_ids,
                attention_mask=attention_mask,
                position_ids=position_ids,
                use_cache=True,
                **kwargs,
            )
        new_cache = getattr(out, "cache", None)
        if new_cache is None:
            new_cache = getattr(out, "past_key_values", None)
        if new_cache is not None:
            self._cache = new_cache
        if self.fp32_head is not None:
            return self.fp32_head(out.last_hidden_state[:, -1])
        return out.logits[:, -1].float()

    @torch.inference_mode()
    def prefill(self, input_ids: Tensor, attention_mask: Tensor, max_new_tokens: int) -> Tensor:
        dev = self.device
        input_ids = input_ids.to(dev)
        attention_mask = attention_mask.to(dev).long()
        b, p = input_ids.shape
        self._mask = torch.ones(b, p + max_new_tokens, dtype=torch.long, device=dev)
        self._mask[:, :p] = attention_mask
        pos = position_ids_from_mask(attention_mask)
        self._cache = _new_dynamic_cache(self.model.config)
        logits = self._forward(input_ids, attention_mask, pos)
        self._pos = pos[:, -1] + 1
        self._cur = p
        return logits

    @torch.inference_mode()
    def step(self, tokens: Tensor) -> Tensor:
        if self._cache is None:
            raise RuntimeError("step() called before prefill()")
        if self._cur >= self._mask.shape[1]:
            raise RuntimeError("KV cache is full: more steps than max_new_tokens")
        tokens = tokens.to(self._pos.device).view(-1, 1)
        self._cur += 1
        logits = self._forward(tokens, self._mask[:, : self._cur], self._pos.view(-1, 1))
        self._pos += 1
        return logits

    @torch.inference_mode()
    def keep(self, rows: Tensor) -> None:
        if self._cache is None:
            raise RuntimeError("keep() called before prefill()")
        rows = _as_rows(rows, self._pos.device)
        self._cache.batch_select_indices(rows)
        self._mask = self._mask.index_select(0, rows)
        self._pos = self._pos.index_select(0, rows)

    @torch.no_grad()
    def load_state_dict(self, state_dict: dict[str, Tensor]) -> None:
        missing, unexpected = self.model.load_state_dict(state_dict, strict=False)
        if unexpected:
            raise KeyError(f"unexpected parameter names: {unexpected[:5]}")
        if self.fp32_head is not None:
            self.fp32_head.load_state_dict(state_dict)
