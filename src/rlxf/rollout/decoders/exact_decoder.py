"""The decoder of exact on-policy rollouts (``rollout.engine_options.batch_invariant: true``).

Its logits are the batch-invariant forward's (``models/batch_invariant``): the same floats the
trainer's exact log-prob pass (``train/exact_log_probs.py``) computes for the same tokens, whatever the
batch, the padding and the step. The KV cache is kept in the canonical layout (a row's token at
position ``j`` in slot ``j``), zeroed, so a slot not yet written adds exactly 0 where a query reaches it.
Slower than ``LlamaDecoder`` (``benchmarks/exact_on_policy.py``): fp32 only, no packed prefill, no SDPA.
"""

from __future__ import annotations

import torch
from torch import Tensor

from rlxf.models.batch_invariant.llama import InvariantLlama, canonical_rows
from rlxf.models.batch_invariant.ops import KEY_BLOCK, padded
from rlxf.rollout.decoders.base import as_row_index
from rlxf.rollout.decoders.llama_decoder import check_supported, sliding_window

__all__ = ["ExactDecoder"]


class ExactDecoder:
    """prefill / step / keep over a copy of the policy's fp32 weights (transformers names)."""

    def __init__(self, model: torch.nn.Module) -> None:
        check_supported(model.config)
        if sliding_window(model.config) is not None:
            raise ValueError("rollout.engine_options.batch_invariant does not apply a sliding window")
        with torch.no_grad():
            state = model.state_dict()
            embed = state["model.embed_tokens.weight"]
            # one copy of a tied head (the embedding), so an update that names either refreshes it
            self.tied = "lm_head.weight" not in state or state["lm_head.weight"].data_ptr() == embed.data_ptr()
            weights = {name: t.detach().clone() for name, t in state.items()
                       if not (self.tied and name == "lm_head.weight") and not name.endswith("rotary_emb.inv_freq")}
        self.net = InvariantLlama.of(model.config, weights)
        self.device = weights["model.embed_tokens.weight"].device
        self.pad_id = 0  # any token id: pad slots are never attended to by a real token
        self.cache: Tensor | None = None  # [layers, 2, B, nkv, L, hd]
        self.pos: Tensor | None = None  # [B] the position of each row's next token

    @torch.no_grad()
    def prefill(self, input_ids: Tensor, attention_mask: Tensor, max_new_tokens: int) -> Tensor:
        ids, am = input_ids.to(self.device), attention_mask.to(self.device).long()
        lengths = am.sum(1)
        if bool((lengths == 0).any()) or not bool(am[:, -1].all()):
            raise ValueError("prefill expects LEFT-padded prompts with at least one token each")
        rows = canonical_rows(ids, lengths, ids.shape[1] - lengths, self.pad_id)
        hidden, kv = self.net.full_forward(rows, lengths, keep_kv=True)
        net, batch, width = self.net, ids.shape[0], rows.shape[1]
        capacity = padded(int(lengths.max()) + int(max_new_tokens), KEY_BLOCK)
        self.cache = torch.zeros(net.n_layers, 2, batch, net.n_kv, max(capacity, width), net.head_dim,
                                 device=self.device)
        for layer, (k, v) in enumerate(kv):
            self.cache[layer, 0, :, :, :width] = k
            self.cache[layer, 1, :, :, :width] = v
        self.pos = lengths.clone()
        last = torch.arange(batch, device=self.device) * width + lengths - 1
        return self.net.logits(hidden.index_select(0, last))

    @torch.no_grad()
    def step(self, tokens: Tensor) -> Tensor:
        if self.cache is None or self.pos is None:
            raise RuntimeError("step() called before prefill()")
        if int(self.pos.max()) >= self.cache.shape[4]:
            raise RuntimeError("KV cache is full: more steps than max_new_tokens")
        hidden = self.net.decode_rows(tokens.to(self.device).view(-1), self.pos, self.cache)
        self.pos = self.pos + 1
        return self.net.logits(hidden)

    @torch.no_grad()
    def keep(self, rows: Tensor) -> None:
        if self.cache is None or self.pos is None:
            raise RuntimeError("keep() called before prefill()")
        rows = as_row_index(rows, self.device)
        self.cache = self.cache.index_select(2, rows)
        self.pos = self.pos.index_select(0, rows)

    @torch.no_grad()
    def load_state_dict(self, state_dict: dict[str, Tensor]) -> None:
        """New policy weights copied in place (exact for fp32 tensors); unknown names raise."""
        skipped = {"lm_head.weight"} if self.tied else set()
        names = [n for n in state_dict if n not in skipped and not n.endswith("rotary_emb.inv_freq")]
        unknown = [name for name in names if name not in self.net.weights]
        if unknown:
            raise KeyError(f"ExactDecoder: unknown parameter names {unknown[:5]}")
        for name in names:
            self.net.weights[name].copy_(state_dict[name].detach())
