"""Lean inference-only Llama-family forward (llama / qwen2 / mistral) with a preallocated KV cache.

Design notes
- Weights are held as *fused* tensors owned by the decoder (one copy of the policy in the inference dtype):
  ``wqkv`` [(nh + 2*nkv) * hd, H] (+ bias for qwen2 / attention_bias) and ``wgu`` [2 * I, H]. ``load_state_dict``
  copies HF-named tensors into the matching slices in place (dtype/device conversion included), so the tensors'
  storage never changes (important for CUDA graphs and for dynamic weight updates).
- ``share_weights``: no copy at all. The decoder's tensors are the model's own (detached aliases), unfused: q, k
  and v (and gate and up) run as separate matmuls, so an in-process trainer's optimizer step is what the
  engine decodes with next, with no weight sync and no second copy of the policy (538 MB for SmolLM2-135M in
  fp32). ``load_state_dict`` then accepts only the model's own tensors (a sync would write into the trainer).
- ``fp32_head`` (``fp32_head.py``): in a lower-precision decoder the LM head is held in fp32 (tied embeddings: an
  fp32 copy beside the embedding, refreshed with it) and multiplies the final hidden state cast to fp32.
- KV cache: one tensor per cohort [n_layers, 2, B, nkv, P + max_new, hd], written in place at slot ``cur``. Every row
  of a cohort writes the same slot each step (left padding), only position ids differ per row.
- Masks are built once per prefill: an additive [B, 1, 1, L] mask that hides left pads. ``step`` attends over the
  slice ``[:cur + 1]`` of the cache, so future slots never need masking and the mask never changes per step.
- Decode attention uses the GQA "query folding" trick: with one query token, the ``g = nh / nkv`` query heads that
  share a kv head are folded into the query-length axis ([B, nkv, g, hd]), so SDPA runs without repeating K/V.
  On the CPU the decode step uses two batched fp32 matmuls instead of SDPA (one query over a short cache: ~1.2x
  faster), and the KV cache is fp32 there even for bf16 weights (half-precision bmm over many tiny matrices is
  slower on the CPU, and it copies cache slices); prefill always uses SDPA.
- RoPE is applied to q and k together with one ``roll`` (rotate_half(x) * sin == x.roll(hd/2) * sign * sin).
- Prefill is packed: projections and MLPs run on the real (non-pad) tokens only, and the last layer runs attention
  output / o_proj / MLP for the last token of each row only (its K/V for all tokens still go to the cache).
- Cohorts (``kv_cohort.py``): ``prefill`` starts one KV cache; ``extend`` adds rows to a running generation as a
  cohort with its own cache (continuous batching). A step runs the projections and MLPs once over every cohort's
  rows and attention per cohort, over its own filled width. Finished rows leave a cohort lazily (``keep``).
- Threads are the caller's business (``torch.set_num_threads``); for tiny models on a few CPU cores 1 is often best.
"""

from __future__ import annotations

import itertools

import torch
import torch.nn.functional as F
from torch import Tensor

from rlxf.models.attention_window import sliding_window
from rlxf.models.rope_frequencies import STATIC_ROPE_TYPES as _STATIC_ROPE_TYPES
from rlxf.models.rope_frequencies import rope_inv_freq as _rope_inv_freq
from rlxf.models.rope_frequencies import rope_params as _rope_params
from rlxf.rollout.decoders.base import as_row_index as _as_rows
from rlxf.rollout.decoders.base import position_ids_from_mask
from rlxf.rollout.decoders.kv_cohort import KVCohort, cohort_logits, split_rows
from rlxf.rollout.decoders.llama_past import prefill_with_past, row_cache
from rlxf.rollout.decoders.shared_weights import alias_weights, project

__all__ = ["LlamaDecoder", "SUPPORTED_MODEL_TYPES", "sliding_window"]

SUPPORTED_MODEL_TYPES = frozenset({"llama", "qwen2", "mistral"})
_TORCH_GQA = tuple(int(x) for x in torch.__version__.split("+")[0].split(".")[:2]) >= (2, 5)


def check_supported(config) -> None:
    """Raise NotImplementedError if ``config`` uses a feature this decoder does not implement."""
    mt = getattr(config, "model_type", None)
    if mt not in SUPPORTED_MODEL_TYPES:
        raise NotImplementedError(f"LlamaDecoder: model_type {mt!r} not supported")
    act = getattr(config, "hidden_act", "silu")
    if act not in ("silu", "swish"):
        raise NotImplementedError(f"LlamaDecoder: hidden_act {act!r} not supported")
    if _rope_params(config)["rope_type"] not in _STATIC_ROPE_TYPES:
        raise NotImplementedError("LlamaDecoder: dynamic rope scaling not supported")
    if getattr(config, "pretraining_tp", 1) not in (1, None):
        raise NotImplementedError("LlamaDecoder: pretraining_tp > 1 not supported")


class LlamaDecoder:
    """Own lean forward for Llama-family models. Build with :meth:`from_hf` or :meth:`from_config`."""

    def __init__(
        self,
        config,
        state_dict: dict[str, Tensor],
        *,
        device: torch.device | str | None = None,
        dtype: torch.dtype | None = None,
        inv_freq: Tensor | None = None,
        attention_scaling: float | None = None,
        fp32_head: bool = False,
        share_weights: bool = False,
    ):
        check_supported(config)
        self.config = config
        any_w = state_dict["model.embed_tokens.weight"]
        self.device = torch.device(device) if device is not None else any_w.device
        self.dtype = dtype if dtype is not None else any_w.dtype
        self.n_layers = nl = config.num_hidden_layers
        self.n_heads = nh = config.num_attention_heads
        self.n_kv = nkv = getattr(config, "num_key_value_heads", None) or nh
        if nh % nkv:
            raise ValueError("num_attention_heads must be a multiple of num_key_value_heads")
        self.head_dim = hd = getattr(config, "head_dim", None) or config.hidden_size // nh
        if hd % 2:
            raise ValueError("head_dim must be even for rotary embeddings")
        self.hidden = H = config.hidden_size
        self.inter = inter = config.intermediate_size
        self.eps = float(config.rms_norm_eps)
        self.sliding_window = sliding_window(config)
        vocab = any_w.shape[0]
        self.tied = bool(getattr(config, "tie_word_embeddings", False))
        if "lm_head.weight" not in state_dict:
            self.tied = True
        self.shares_weights = share_weights
        own_kind = self.dtype == any_w.dtype and self.device == any_w.device
        if share_weights and (not own_kind or fp32_head and self.dtype != torch.float32):
            raise ValueError(f"share_weights: the decoder computes in the model's own dtype and device "
                             f"({any_w.dtype}, {any_w.device}) with no fp32 head copy; drop engine_options "
                             "dtype / fp32_lm_head, or share_weights")

        if inv_freq is None:
            inv_freq, attention_scaling = _rope_inv_freq(config, hd)
        self.inv_freq = inv_freq.detach().float().to(self.device)
        self.attention_scaling = 1.0 if attention_scaling is None else float(attention_scaling)
        self._rope_len = 0
        self._cos = self._sin = None  # [L, hd] tables (sin carries the rotate_half sign)
        self._cs = None  # [L, 2, hd]: cos and signed sin side by side (one gather per step)

        kw = {"device": self.device, "dtype": self.dtype}
        has = state_dict.__contains__
        p0 = "model.layers.0."
        qkv_bias = has(p0 + "self_attn.q_proj.bias")
        o_bias = has(p0 + "self_attn.o_proj.bias")
        mlp_bias = has(p0 + "mlp.gate_proj.bias")
        self.embed = torch.empty(vocab, H, **kw)
        self.norm = torch.empty(H, **kw)
        head_fp32 = fp32_head and self.dtype != torch.float32  # an fp32 decoder's head is fp32 anyway
        if head_fp32:
            self.lm_head = torch.empty(vocab, H, device=self.device, dtype=torch.float32)
        else:
            self.lm_head = self.embed if self.tied else torch.empty(vocab, H, **kw)
        # names whose value also goes to a second tensor: a tied fp32 head copies the embedding's (fp32) source
        self._mirrors: dict[str, Tensor] = {"model.embed_tokens.weight": self.lm_head} if head_fp32 and self.tied else {}
        nq, nk = nh * hd, nkv * hd
        self.layers: list[dict[str, Tensor | None]] = []
        targets: dict[str, Tensor] = {"model.embed_tokens.weight": self.embed, "model.norm.weight": self.norm}
        if not self.tied:
            targets["lm_head.weight"] = self.lm_head
        for i in range(nl):
            ly = {
                "ln1": torch.empty(H, **kw),
                "ln2": torch.empty(H, **kw),
                "wqkv": torch.empty(nq + 2 * nk, H, **kw),
                "bqkv": torch.empty(nq + 2 * nk, **kw) if qkv_bias else None,
                "wo": torch.empty(H, nq, **kw),
                "bo": torch.empty(H, **kw) if o_bias else None,
                "wgu": torch.empty(2 * inter, H, **kw),
                "bgu": torch.empty(2 * inter, **kw) if mlp_bias else None,
                "wd": torch.empty(H, inter, **kw),
                "bd": torch.empty(H, **kw) if mlp_bias else None,
            }
            self.layers.append(ly)
            p = f"model.layers.{i}."
            targets[p + "input_layernorm.weight"] = ly["ln1"]
            targets[p + "post_attention_layernorm.weight"] = ly["ln2"]
            targets[p + "self_attn.q_proj.weight"] = ly["wqkv"][:nq]
            targets[p + "self_attn.k_proj.weight"] = ly["wqkv"][nq : nq + nk]
            targets[p + "self_attn.v_proj.weight"] = ly["wqkv"][nq + nk :]
            targets[p + "self_attn.o_proj.weight"] = ly["wo"]
            targets[p + "mlp.gate_proj.weight"] = ly["wgu"][:inter]
            targets[p + "mlp.up_proj.weight"] = ly["wgu"][inter:]
            targets[p + "mlp.down_proj.weight"] = ly["wd"]
            if qkv_bias:
                targets[p + "self_attn.q_proj.bias"] = ly["bqkv"][:nq]
                targets[p + "self_attn.k_proj.bias"] = ly["bqkv"][nq : nq + nk]
                targets[p + "self_attn.v_proj.bias"] = ly["bqkv"][nq + nk :]
            if o_bias:
                targets[p + "self_attn.o_proj.bias"] = ly["bo"]
            if mlp_bias:
                targets[p + "mlp.gate_proj.bias"] = ly["bgu"][:inter]
                targets[p + "mlp.up_proj.bias"] = ly["bgu"][inter:]
                targets[p + "mlp.down_proj.bias"] = ly["bd"]
        self._targets = targets
        missing = [k for k in targets if k not in state_dict]
        if missing:
            raise KeyError(f"LlamaDecoder: state_dict lacks {missing[:5]}{'...' if len(missing) > 5 else ''}")
        if share_weights:  # the empty fused tensors above are never written, so never resident: dropped here
            alias_weights(self, state_dict)
        else:
            self.load_state_dict(state_dict)

        self._scale = hd**-0.5
        self._matmul_attention = self.device.type == "cpu"
        # CPU: the KV cache (and so decode attention) is fp32 whatever the weights' dtype: half-precision
        # batched matmuls over many tiny per-row matrices are slower there than fp32 ones, and copy
        # non-contiguous cache slices. The projections and MLP still run in ``dtype``.
        self._kv_dtype = torch.float32 if self._matmul_attention else self.dtype
        # per-generation state: the KV caches of the rows being decoded (set by prefill, grown by extend)
        self.cohorts: list[KVCohort] = []

    # ------------------------------------------------------------------ construction / weights
    @classmethod
    def from_hf(cls, model, *, device=None, dtype=None, fp32_head: bool = False, share_weights: bool = False) -> LlamaDecoder:
        """Build from a transformers ``LlamaForCausalLM`` / ``Qwen2ForCausalLM`` / ``MistralForCausalLM``.
        The decoder copies the weights (fused layout) onto the model's device/dtype unless told otherwise."""
        check_supported(model.config)
        inv_freq = scaling = None
        rotary = getattr(getattr(model, "model", None), "rotary_emb", None)
        if rotary is not None and getattr(rotary, "inv_freq", None) is not None:
            inv_freq = getattr(rotary, "original_inv_freq", None)
            inv_freq = rotary.inv_freq if inv_freq is None else inv_freq
            scaling = float(getattr(rotary, "attention_scaling", 1.0))
        with torch.no_grad():
            sd = model.state_dict()
        return cls(model.config, sd, device=device, dtype=dtype, inv_freq=inv_freq, attention_scaling=scaling,
                   fp32_head=fp32_head, share_weights=share_weights)

    @classmethod
    def from_config(
        cls, config, state_dict: dict[str, Tensor], *, device=None, dtype=None, fp32_head: bool = False
    ) -> LlamaDecoder:
        return cls(config, state_dict, device=device, dtype=dtype, fp32_head=fp32_head)

    @torch.no_grad()
    def load_state_dict(self, state_dict: dict[str, Tensor]) -> None:
        """Copy HF-named tensors into the fused weights in place. Partial dicts are allowed (e.g. sharded
        updates); unknown names raise. With tied embeddings ``lm_head.weight`` is ignored. A shared decoder
        (``share_weights``) takes the model's own tensors only, and copies nothing."""
        unknown = []
        for name, value in state_dict.items():
            tgt = self._targets.get(name)
            if tgt is None:
                if name.endswith("rotary_emb.inv_freq") or (self.tied and name == "lm_head.weight"):
                    continue
                unknown.append(name)
                continue
            if tgt.shape != value.shape:
                raise ValueError(f"{name}: shape {tuple(value.shape)} != expected {tuple(tgt.shape)}")
            if self.shares_weights:
                if value.data_ptr() != tgt.data_ptr():
                    raise ValueError(f"{name}: this decoder shares the model's weights (share_weights), so loading "
                                     "other tensors would overwrite the model's; it already holds every update")
                continue
            tgt.copy_(value.detach(), non_blocking=True)
            if name in self._mirrors:
                self._mirrors[name].copy_(value.detach(), non_blocking=True)
        if unknown:
            raise KeyError(f"LlamaDecoder: unknown parameter names {unknown[:5]}")

    # ------------------------------------------------------------------ helpers
    def _ensure_rope(self, length: int) -> None:
        if length <= self._rope_len:
            return
        length = max(length, 2 * self._rope_len)
        t = torch.arange(length, device=self.device, dtype=torch.float32)
        freqs = torch.outer(t, self.inv_freq)
        emb = torch.cat((freqs, freqs), dim=-1)
        half = self.head_dim // 2
        sign = torch.ones(self.head_dim, device=self.device)
        sign[:half] = -1.0
        self._cos = (emb.cos() * self.attention_scaling).to(self.dtype)
        self._sin = (emb.sin() * self.attention_scaling * sign).to(self.dtype)
        self._cs = torch.stack((self._cos, self._sin), dim=1)
        self._rope_len = length

    def _rms(self, x: Tensor, w: Tensor) -> Tensor:
        if x.dtype == torch.float32:
            return F.rms_norm(x, (self.hidden,), w, self.eps)
        # HF order: normalise in fp32, cast back, then scale by the weight
        return F.rms_norm(x.float(), (self.hidden,), None, self.eps).to(x.dtype) * w

    def _head(self, hidden: Tensor) -> Tensor:
        """Final hidden state (after the norm) -> fp32 logits; an fp32 head takes the state cast to fp32."""
        if self.lm_head.dtype != hidden.dtype:
            hidden = hidden.float()
        return F.linear(hidden, self.lm_head).float()

    def _rope(self, x: Tensor, cos: Tensor, sin: Tensor) -> Tensor:
        return torch.addcmul(x * cos, x.roll(self.head_dim // 2, -1), sin)

    # ------------------------------------------------------------------ decoding
    # one cohort's cache, for the tests and tools that look at it
    kv = property(lambda self: self._only_cohort().kv)
    live = property(lambda self: self._only_cohort().live)

    def _only_cohort(self) -> KVCohort:
        if len(self.cohorts) != 1:
            raise RuntimeError(f"the decoder holds {len(self.cohorts)} cohorts, not one")
        return self.cohorts[0]

    @torch.inference_mode()
    def prefill(self, input_ids: Tensor, attention_mask: Tensor, max_new_tokens: int) -> Tensor:
        cohort, logits = self._prefill(input_ids, attention_mask, max_new_tokens)
        self.cohorts = [cohort]
        return logits

    @torch.inference_mode()
    def extend(
        self, input_ids: Tensor, attention_mask: Tensor, max_new_tokens: int, expand: Tensor | None = None,
    ) -> Tensor:
        """Add rows to the running generation without touching the cached ones (continuous batching): the
        new LEFT-padded prompts are prefilled as a cohort of their own. ``expand`` [rows] (optional) repeats
        the prompts into rows (the ``n`` samples of a prompt share its prefill). Returns the new rows'
        logits; the caller's rows are then the running ones followed by the new ones."""
        if not self.cohorts:
            raise RuntimeError("extend() called before prefill()")
        cohort, logits = self._prefill(input_ids, attention_mask, max_new_tokens)
        if expand is not None:
            expand = _as_rows(expand, self.device)
            cohort.keep(expand)
            logits = logits.index_select(0, expand)
        self.cohorts.append(cohort)
        return logits

    @torch.inference_mode()
    def extend_with_past(self, pasts: list[Tensor | None], new_ids: list[list[int]], max_new_tokens: int) -> Tensor:
        """Add rows that continue cached sequences (``llama_past.py``: ``pasts[i]`` from :meth:`row_cache`, or
        None) as a cohort of their own after the running rows (or as the only one); returns their logits."""
        cohort, logits = prefill_with_past(self, pasts, new_ids, max_new_tokens)
        self.cohorts = [c for c in self.cohorts if c.rows] + [cohort]
        return logits

    def row_cache(self, row: int) -> Tensor:
        """A copy of the caller's ``row``'s filled K/V (its past for :meth:`extend_with_past`)."""
        return row_cache(self.cohorts, row)

    def _prefill(self, input_ids: Tensor, attention_mask: Tensor, max_new_tokens: int) -> tuple[KVCohort, Tensor]:
        dev = self.device
        ids = input_ids.to(dev)
        am = attention_mask.to(dev).bool()
        B, P = ids.shape
        L = P + int(max_new_tokens)
        if self.sliding_window is not None and L > self.sliding_window:
            raise NotImplementedError(
                f"LlamaDecoder: sliding_window={self.sliding_window} < max length {L} "
                "(rollout.engine_options.decoder=auto or hf picks the decoder that applies the window)"
            )
        nh, nkv, hd, inter = self.n_heads, self.n_kv, self.head_dim, self.inter
        C = nh + 2 * nkv
        self._ensure_rope(L)
        # slots >= cur are never read (step attends over [:cur + 1]), so the cache needs no zeroing
        cache = torch.empty(self.n_layers, 2, B, nkv, L, hd, device=dev, dtype=self._kv_dtype)

        pos = position_ids_from_mask(am)  # [B, P]
        # Packed prefill: projections / MLP run on the real tokens only ([N, H]); only attention uses the padded
        # [B, P] layout. One sync (nonzero) per prefill, none per step.
        flat = am.reshape(-1)
        idx = flat.nonzero().squeeze(1)  # [N] indices into B * P
        N = idx.numel()
        if N == 0 or not bool(am[:, -1].all()):
            raise ValueError("prefill expects LEFT-padded prompts with at least one token each")
        packed = N < B * P
        if packed:
            pos_t, ids_t = pos.reshape(-1)[idx], ids.reshape(-1)[idx]
            buf = torch.zeros(B * P, C, hd, device=dev, dtype=self.dtype)  # pad rows stay 0
        else:
            pos_t, ids_t = pos.reshape(-1), ids.reshape(-1)
        cos = self._cos[pos_t].unsqueeze(1)  # [N, 1, hd]
        sin = self._sin[pos_t].unsqueeze(1)
        # boolean [B, 1, P, P]: causal & key-not-pad; the diagonal is always allowed so pad queries never see an
        # all-masked row (their outputs are finite and no real token attends to them).
        ar = torch.arange(P, device=dev)
        allowed = (ar[None, :] <= ar[:, None]) & am[:, None, :]
        allowed |= torch.eye(P, dtype=torch.bool, device=dev)
        mask = allowed.unsqueeze(1)
        gqa = {"enable_gqa": True} if (nkv != nh and _TORCH_GQA) else {}

        last = am.sum(1).cumsum(0) - 1 if packed else torch.arange(1, B + 1, device=dev) * P - 1  # [B] in x
        n_layers = self.n_layers
        x = F.embedding(ids_t, self.embed)  # [N, H]
        for li, ly in enumerate(self.layers):
            qkv = project(self._rms(x, ly["ln1"]), ly["wqkv"], ly["bqkv"]).view(N, C, hd)
            qk = qkv[:, : nh + nkv]
            # rope in place (both inputs are temporaries, so writing into qk is safe)
            torch.addcmul(qk * cos, qk.roll(hd // 2, -1), sin, out=qk)
            if packed:
                buf.index_copy_(0, idx, qkv)
                qkv = buf
            qkv = qkv.view(B, P, C, hd)
            q = qkv[:, :, :nh].transpose(1, 2)
            k = qkv[:, :, nh : nh + nkv].transpose(1, 2)
            v = qkv[:, :, nh + nkv :].transpose(1, 2)
            cache[li, 0, :, :, :P] = k
            cache[li, 1, :, :, :P] = v
            if nkv != nh and not _TORCH_GQA:
                k = k.repeat_interleave(nh // nkv, dim=1)
                v = v.repeat_interleave(nh // nkv, dim=1)
            if li == n_layers - 1:
                # last layer: K/V are cached above; attention output, o_proj and MLP are only needed for the last
                # token of each row (skips ~(1 - 1/P) of that layer's o_proj + MLP work)
                q, mask, x = q[:, :, -1:], mask[:, :, -1:], x.index_select(0, last)
            o = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, **gqa)  # [B, nh, Pq, hd]
            o = o.transpose(1, 2).reshape(-1, nh * hd)
            if packed and li < n_layers - 1:
                o = o.index_select(0, idx)
            x = x + F.linear(o, ly["wo"], ly["bo"])
            gu = project(self._rms(x, ly["ln2"]), ly["wgu"], ly["bgu"])
            x = x + F.linear(F.silu(gu[:, :inter]) * gu[:, inter:], ly["wd"], ly["bd"])
        logits = self._head(self._rms(x, self.norm))  # x is [B, H] here

        step_mask = torch.zeros(B, 1, 1, L, device=dev, dtype=self._kv_dtype)
        step_mask[:, 0, 0, :P].masked_fill_(~am, float("-inf"))
        return KVCohort(cache, pos[:, -1] + 1, step_mask, cur=P), logits

    @torch.inference_mode()
    def step(self, tokens: Tensor) -> Tensor:
        # CUDA graphs: this is the function to capture (one graph per active-batch bucket and cohort count). For
        # that, attend over the full cache length with ``step_mask`` holding -inf on future slots (cleared in place
        # at slot ``cur``), keep ``cur`` in a device tensor and write K/V with ``index_copy_``: every shape static.
        if not self.cohorts:
            raise RuntimeError("step() called before prefill()")
        if any(c.cur >= c.kv.shape[4] for c in self.cohorts):
            raise RuntimeError("KV cache is full: more steps than max_new_tokens")
        nh, nkv, hd, inter = self.n_heads, self.n_kv, self.head_dim, self.inter
        tokens = tokens.to(self.device, non_blocking=True).view(-1)
        # finished rows still cached step along (any token), their logits dropped (KVCohort.keep)
        if len(self.cohorts) == 1:
            tokens = self.cohorts[0].scatter(tokens)
        else:
            bounds = list(itertools.accumulate((c.rows for c in self.cohorts), initial=0))
            tokens = torch.cat([c.scatter(tokens[a:b]) for c, a, b in zip(self.cohorts, bounds, bounds[1:])])
        B = tokens.shape[0]
        pos = self.cohorts[0].pos if len(self.cohorts) == 1 else torch.cat([c.pos for c in self.cohorts])
        cs = self._cs[pos]  # [B, 2, hd]
        cos, sin = cs[:, :1], cs[:, 1:]  # [B, 1, hd] each

        x = F.embedding(tokens, self.embed)  # [B, H]
        for li, ly in enumerate(self.layers):
            qkv = project(self._rms(x, ly["ln1"]), ly["wqkv"], ly["bqkv"]).view(B, nh + 2 * nkv, hd)
            qk = self._rope(qkv[:, : nh + nkv], cos, sin)
            o = self._attend(li, qk, qkv[:, nh + nkv :])
            x = x + F.linear(o.reshape(B, nh * hd), ly["wo"], ly["bo"])
            gu = project(self._rms(x, ly["ln2"]), ly["wgu"], ly["bgu"])
            x = x + F.linear(F.silu(gu[:, :inter]) * gu[:, inter:], ly["wd"], ly["bd"])
        logits = self._head(self._rms(x, self.norm))
        for cohort in self.cohorts:
            cohort.cur += 1
            cohort.pos += 1
        return cohort_logits(logits, self.cohorts)

    def _attend(self, layer: int, qk: Tensor, v: Tensor) -> Tensor:
        """One decode step's attention, cohort by cohort: write each row's K/V at its cohort's slot ``cur``
        and attend over the cohort's filled slots. qk [B, nh + nkv, hd] (rotated), v [B, nkv, hd]."""
        nh, nkv, hd = self.n_heads, self.n_kv, self.head_dim
        outs, start = [], 0
        for cohort in self.cohorts:
            rows, c = slice(start, start + cohort.cached), cohort.cur
            start += cohort.cached
            kv_l = cohort.kv[layer, :, :, :, : c + 1]
            kv_l[0, :, :, c] = qk[rows, nh:]
            kv_l[1, :, :, c] = v[rows]
            mask = cohort.step_mask[..., : c + 1]  # [b, 1, 1, c+1], broadcast over (nkv, g)
            q = qk[rows, :nh].view(-1, nkv, nh // nkv, hd)  # fold the query heads of each kv group
            if self._matmul_attention:
                # CPU: for one query over a short cache two batched fp32 matmuls beat SDPA's flash kernel
                # (~1.2x at the tiny model's shapes); scale 1/sqrt(hd) as SDPA's default.
                scores = torch.matmul(q.to(self._kv_dtype), kv_l[0].transpose(-1, -2)).mul_(self._scale).add_(mask)
                outs.append(torch.matmul(scores.softmax(-1), kv_l[1]).to(self.dtype))
            else:
                outs.append(F.scaled_dot_product_attention(q, kv_l[0], kv_l[1], attn_mask=mask))
        return outs[0] if len(outs) == 1 else torch.cat(outs)

    @torch.inference_mode()
    def keep(self, rows: Tensor) -> None:
        """Keep only these rows (indices into the caller's rows); cohorts left without rows are dropped."""
        if not self.cohorts:
            raise RuntimeError("keep() called before prefill()")
        rows = _as_rows(rows, self.device)
        for cohort, own in zip(self.cohorts, split_rows(rows, self.cohorts)):
            cohort.keep(own)
        if len(self.cohorts) > 1:
            self.cohorts = [c for c in self.cohorts if c.rows]

    def __repr__(self) -> str:
        return (
            f"LlamaDecoder({self.config.model_type}, layers={self.n_layers}, heads={self.n_heads}/{self.n_kv}, "
            f"head_dim={self.head_dim}, dtype={self.dtype}, device={self.device})"
        )
