"""The batch-invariant Llama-family forward (llama / qwen2 / mistral without a sliding window), fp32.

One set of per-token functions serves both sides of exact on-policy training: the trainer's full
causal pass over prompt + response (``full_forward``) and the rollout engine's prefill and decode
steps (``decode_rows``, ``rollout/decoders/exact_decoder.py``). Rows are laid out canonically: a
sequence's token at position ``j`` sits at slot ``j`` (no left padding), so the keys a query sees and
the order they are summed in do not depend on the batch it came in. Weights are read by their
transformers names from a state dict: the trainer's own tensors, or the engine's copy of them.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import Tensor

from rlxf.models.batch_invariant.ops import (
    ATTENTION_ROWS,
    KEY_BLOCK,
    attention,
    linear,
    pad_rows,
    padded,
    rope,
)
from rlxf.models.rope_frequencies import rope_inv_freq

__all__ = ["InvariantLlama", "MODEL_TYPES", "QUERY_CHUNK", "canonical_rows"]

MODEL_TYPES = frozenset({"llama", "qwen2", "mistral"})
QUERY_CHUNK = 64  # queries per attention call in a full pass: bounds the [.., queries, keys, hd] products


@dataclass
class InvariantLlama:
    """A Llama-family config's shapes; ``weights`` maps transformers names to fp32 tensors."""

    weights: dict[str, Tensor]
    n_layers: int
    n_heads: int
    n_kv: int
    head_dim: int
    eps: float
    inv_freq: Tensor
    rope_scaling: float

    @classmethod
    def of(cls, config, weights: dict[str, Tensor]) -> InvariantLlama:
        if getattr(config, "model_type", None) not in MODEL_TYPES:
            raise ValueError(f"exact on-policy (batch_invariant) covers {', '.join(sorted(MODEL_TYPES))} "
                             f"models, not {getattr(config, 'model_type', None)!r}")
        for name, value in weights.items():
            if value.is_floating_point() and value.dtype != torch.float32:
                raise ValueError(f"exact on-policy (batch_invariant) runs in float32; {name} is {value.dtype}")
        nh = config.num_attention_heads
        hd = getattr(config, "head_dim", None) or config.hidden_size // nh
        inv_freq, scaling = rope_inv_freq(config, hd)
        device = weights["model.embed_tokens.weight"].device
        return cls(weights, config.num_hidden_layers, nh, getattr(config, "num_key_value_heads", None) or nh, hd,
                   float(config.rms_norm_eps), inv_freq.to(device), scaling)

    def _w(self, name: str) -> Tensor | None:
        return self.weights.get(name)

    @property
    def head(self) -> Tensor:
        """The LM head's weight (the embedding with tied embeddings)."""
        return self.weights.get("lm_head.weight", self.weights["model.embed_tokens.weight"])

    def _norm(self, x: Tensor, name: str) -> Tensor:
        return F.rms_norm(x, (x.shape[-1],), self.weights[name], self.eps)

    def _proj(self, x: Tensor, name: str) -> Tensor:
        return linear(x, self.weights[name + ".weight"], self._w(name + ".bias"))

    def qkv(self, layer: int, x: Tensor, positions: Tensor) -> tuple[Tensor, Tensor, Tensor]:
        """Rows x [M, H] (M a multiple of ROW_TILE) at ``positions`` [M] -> rotated q [M, nh, hd], k and v
        [M, nkv, hd]."""
        p = f"model.layers.{layer}."
        h = self._norm(x, p + "input_layernorm.weight")
        m, hd = x.shape[0], self.head_dim
        q = self._proj(h, p + "self_attn.q_proj").view(m, self.n_heads, hd)
        k = self._proj(h, p + "self_attn.k_proj").view(m, self.n_kv, hd)
        v = self._proj(h, p + "self_attn.v_proj").view(m, self.n_kv, hd)
        return rope(q, positions, self.inv_freq, self.rope_scaling), rope(k, positions, self.inv_freq,
                                                                             self.rope_scaling), v

    def finish_layer(self, layer: int, x: Tensor, attended: Tensor) -> Tensor:
        """The residual stream after the layer: x [M, H] plus o_proj of ``attended`` [M, nh * hd], plus the MLP."""
        p = f"model.layers.{layer}."
        x = x + self._proj(attended, p + "self_attn.o_proj")
        h = self._norm(x, p + "post_attention_layernorm.weight")
        gate, up = self._proj(h, p + "mlp.gate_proj"), self._proj(h, p + "mlp.up_proj")
        return x + self._proj(F.silu(gate) * up, p + "mlp.down_proj")

    def logits(self, hidden_rows: Tensor) -> Tensor:
        """Final norm and LM head of rows [N, H] (any N) -> fp32 logits [N, V]."""
        n = hidden_rows.shape[0]
        return linear(self._norm(pad_rows(hidden_rows), "model.norm.weight"), self.head)[:n]

    def _group(self, q: Tensor, batch: int, length: int) -> Tensor:
        """q rows [B * T, nh, hd] -> [B, nkv, g, T, hd] (query head h reads kv head h // g)."""
        g = self.n_heads // self.n_kv
        return q.view(batch, length, self.n_kv, g, self.head_dim).permute(0, 2, 3, 1, 4)

    @staticmethod
    def _ungroup(o: Tensor) -> Tensor:
        """[B, nkv, g, T, hd] -> rows [B * T, nh * hd]."""
        b, nkv, g, t, hd = o.shape
        return o.permute(0, 3, 1, 2, 4).reshape(b * t, nkv * g * hd)

    def _attend(self, q: Tensor, k: Tensor, v: Tensor, q_pos: Tensor) -> Tensor:
        """q [B, nkv, g, T, hd] at positions q_pos [B, T] -> [B, nkv, g, T, hd]: the g x T query rows of a kv
        head go to ``attention`` as one stack, zero rows added up to a multiple of ATTENTION_ROWS."""
        batch, nkv, g, length, hd = q.shape
        rows = q.reshape(batch, nkv, g * length, hd)
        pos = q_pos.repeat(1, g)  # row gi * T + t is query t of head gi
        extra = padded(g * length, ATTENTION_ROWS) - g * length
        if extra:
            rows = torch.cat([rows, rows.new_zeros(batch, nkv, extra, hd)], dim=2)
            pos = torch.cat([pos, pos[:, :1].expand(batch, extra)], dim=1)
        out = attention(rows, k, v, pos, self.head_dim**-0.5)
        return out[:, :, : g * length].view(batch, nkv, g, length, hd)

    def full_forward(
        self, ids: Tensor, lengths: Tensor, keep_kv: bool = False
    ) -> tuple[Tensor, list[tuple[Tensor, Tensor]]]:
        """Causal pass over canonical rows ``ids`` [B, L] (L a multiple of KEY_BLOCK) whose first
        ``lengths[b]`` slots are tokens -> (final hidden states before the norm, [B * L, H] with zeros past
        each row's length; per layer (k, v) [B, nkv, L, hd] when ``keep_kv``, zeros past the lengths).

        Packed: the per-token layers run on the real tokens only (rows are independent of each other in
        them, so the arrangement changes no float); only attention uses the [B, L] layout."""
        batch, length = ids.shape
        if length % KEY_BLOCK:
            raise ValueError(f"full_forward needs a multiple of {KEY_BLOCK} positions, got {length}")
        slots = torch.arange(length, device=ids.device)
        real = (slots[None, :] < lengths[:, None]).reshape(-1).nonzero().squeeze(1)  # [N] into B * L
        n = real.numel()
        q_pos = slots.expand(batch, length)
        x = pad_rows(F.embedding(ids.reshape(-1)[real], self.weights["model.embed_tokens.weight"]))
        flat_pos = pad_rows(slots.repeat(batch)[real])
        kept = []
        for layer in range(self.n_layers):
            q, k, v = (self._unpack(t[:n], real, batch * length) for t in self.qkv(layer, x, flat_pos))
            k = k.view(batch, length, self.n_kv, self.head_dim).transpose(1, 2).contiguous()
            v = v.view(batch, length, self.n_kv, self.head_dim).transpose(1, 2).contiguous()
            q = self._group(q, batch, length)
            o = torch.cat([self._attend(q[:, :, :, s:s + QUERY_CHUNK], k, v, q_pos[:, s:s + QUERY_CHUNK])
                           for s in range(0, length, QUERY_CHUNK)], dim=3)
            x = self.finish_layer(layer, x, pad_rows(self._ungroup(o).index_select(0, real)))
            if keep_kv:
                kept.append((k, v))
        return self._unpack(x[:n], real, batch * length), kept

    @staticmethod
    def _unpack(rows: Tensor, at: Tensor, total: int) -> Tensor:
        """Packed rows [N, ...] -> [total, ...] with row i at ``at[i]``, zeros elsewhere."""
        return rows.new_zeros((total, *rows.shape[1:])).index_copy_(0, at, rows)

    def decode_rows(self, tokens: Tensor, positions: Tensor, cache: Tensor) -> Tensor:
        """One decode step: ``tokens`` [B] at ``positions`` [B]; ``cache`` [layers, 2, B, nkv, L, hd] in the
        canonical layout gets each row's k / v at its position. Returns final hidden rows [B, H]."""
        batch = tokens.shape[0]
        rows = torch.arange(batch, device=tokens.device)
        x = pad_rows(F.embedding(tokens, self.weights["model.embed_tokens.weight"]))
        flat_pos = pad_rows(positions)
        for layer in range(self.n_layers):
            q, k, v = self.qkv(layer, x, flat_pos)
            cache[layer, 0, rows, :, positions] = k[:batch]
            cache[layer, 1, rows, :, positions] = v[:batch]
            o = self._attend(self._group(q[:batch], batch, 1), cache[layer, 0], cache[layer, 1], positions[:, None])
            x = self.finish_layer(layer, x, pad_rows(self._ungroup(o)))
        return x[:batch]


def canonical_rows(ids: Tensor, lengths: Tensor, starts: Tensor, pad_id: int, width: int | None = None) -> Tensor:
    """[B, W] rows: row b's ``lengths[b]`` tokens from column ``starts[b]`` of ``ids``, moved to slot 0
    and followed by ``pad_id``; ``W`` is ``width`` or the longest length, rounded up to KEY_BLOCK."""
    batch = ids.shape[0]
    width = padded(int(lengths.max()) if width is None else width, KEY_BLOCK)
    slots = torch.arange(width, device=ids.device)[None, :]
    source = (starts[:, None] + slots).clamp(max=ids.shape[1] - 1)
    out = ids.gather(1, source)
    return out.masked_fill(slots >= lengths[:, None], pad_id) if batch else out
