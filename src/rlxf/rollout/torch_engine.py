"""The built-in rollout engine: a lean sampling loop over a KV-cache decoder.

* Shared prefill: the ``n`` samples of a prompt share its prefix, so each prompt is prefilled once
  and its KV cache (and first-token logits) are then expanded ``n`` times (``decoder.keep`` with
  repeated rows) — prefill costs ``1/n`` of a per-sample prefill.
* Finished sequences leave the batch (``decoder.keep``), so late steps cost what the unfinished rows
  cost.
* No per-token work grows in Python with the batch: one sampling call and one decoder step per token.

The decoder is ``rollout/decoders``' fast Llama-family implementation where the architecture allows,
else a generic transformers-cache decoder.
"""

from __future__ import annotations

import torch

from rlxf.batch import left_pad
from rlxf.config_error import ConfigError
from rlxf.models.loading import DTYPES
from rlxf.rollout.decoders import make_decoder
from rlxf.rollout.decoders.base import prefill_expanded
from rlxf.rollout.engine import INTERRUPTIBLE, ROLLOUT_ENGINES
from rlxf.rollout.generation import Generation, response_mask_from_lengths
from rlxf.rollout.interruptible import InterruptibleGeneration
from rlxf.rollout.sampling import SamplingParams, sample_tokens
from rlxf.rollout.stops import is_stop, stop_ids_tensor
from rlxf.rollout.turn_sessions import TurnSessions


def decode_dtype(name: str) -> torch.dtype:
    if name not in DTYPES:
        raise ConfigError(f"rollout.engine_options.dtype {name!r} is not one of {', '.join(DTYPES)}")
    return DTYPES[name]


@ROLLOUT_ENGINES.register("torch")
class TorchRolloutEngine:
    capabilities = frozenset({INTERRUPTIBLE})  # its KV-cache decoder steps one token at a time

    def __init__(
        self, model: torch.nn.Module, eos_id: int | list[int], pad_id: int, dtype: str | None = None,
        decoder: str = "auto", fp32_lm_head: bool = False, batch_invariant: bool = False,
        share_weights: bool = False,
    ) -> None:
        """``dtype`` (``rollout.engine_options``; default: the model's) is the precision the engine decodes
        in, e.g. ``bfloat16`` rollouts for an fp32 trainer: faster where the hardware has bf16 matmuls,
        at the price of rollout log-probs that differ from the trainer's (``algorithm.tis_level``
        corrects for that; ``rollout_log_prob_diff`` measures it). ``decoder`` (``auto`` | ``llama`` |
        ``hf``): the fast Llama-family decoder or transformers' own forward; ``auto`` picks the fast
        one where the architecture allows (no sliding window shorter than the context). ``fp32_lm_head``:
        in a lower-precision engine, the last hidden state -> logits matmul runs in fp32 against an
        fp32 copy of the head, refreshed by every weight update (``decoders/fp32_head.py``): a smaller
        rollout/trainer log-prob gap for a ``vocab x hidden`` fp32 tensor (a tied head keeps it beside
        the bf16 embedding). No effect on an fp32 engine. ``batch_invariant``: exact on-policy rollouts
        (``decoders/exact_decoder.py``): the log-probs the tokens are sampled from are bit for bit the
        trainer's (its log-prob pass then runs the same batch-invariant forward); fp32, Llama-family.
        ``share_weights``: decode with the policy's own tensors, no copy (``decoders/llama_decoder.py``): the
        trainer's step is what the next rollout samples from, with no weight sync; for the synchronous loop
        with the policy in this process (``loops/setup.py`` refuses the rest)."""
        for name, value in (("fp32_lm_head", fp32_lm_head), ("batch_invariant", batch_invariant),
                            ("share_weights", share_weights)):
            if not isinstance(value, bool):
                raise ValueError(f"rollout.engine_options.{name} must be true or false, got {value!r}")
        self.model = model
        self.eos_id = eos_id
        self.pad_id = pad_id
        self.version = 0
        self.decoder = make_decoder(
            model, prefer=decoder, dtype=None if dtype is None else decode_dtype(dtype), fp32_head=fp32_lm_head,
            batch_invariant=batch_invariant, share_weights=share_weights,
        )
        self.shares_policy_weights = share_weights  # runtime/weight_sync.py: nothing to send
        self.device = next(model.parameters()).device
        self.stop_ids = stop_ids_tensor(eos_id, self.device)  # any of them ends a sample

    def update_weights(self, state_dict: dict[str, torch.Tensor], version: int) -> None:
        self.decoder.load_state_dict(state_dict)
        self.version = version

    def start_interruptible(self, params: SamplingParams) -> InterruptibleGeneration:
        """An empty pausable generation over this engine's decoder (``loop: rl_async``'s producer)."""
        return InterruptibleGeneration(self.decoder, [], params, self.version, self.eos_id, self.pad_id, self.device)

    def open_turn_sessions(self, params: SamplingParams, keep_cache: bool = True) -> TurnSessions | None:
        """Multi-turn decoding with per-trajectory KV caches kept across turns and continuous batching
        (``turn_sessions.py``); None where the decoder cannot prefill over a kept cache (``HFDecoder``)."""
        if not hasattr(self.decoder, "extend_with_past"):
            return None
        return TurnSessions(self, params, keep_cache)

    # no_grad, not inference_mode: the returned ids and log-probs feed autograd-tracked training.
    @torch.no_grad()
    def generate(
        self, prompts: list[list[int]], params: SamplingParams, generator: torch.Generator | None = None
    ) -> Generation:
        ids, mask = left_pad(prompts, self.pad_id, self.device)
        total, budget = len(prompts) * params.n, params.max_new_tokens
        out_ids = torch.full((total, budget), self.pad_id, dtype=torch.long, device=self.device)
        out_logp = torch.zeros((total, budget), dtype=torch.float32, device=self.device)
        lengths = torch.full((total,), budget, dtype=torch.long, device=self.device)
        stopped = torch.zeros(total, dtype=torch.bool, device=self.device)
        active = torch.arange(total, device=self.device)

        # row i * n + j is sample j of prompt i
        expand = torch.arange(len(prompts), device=self.device).repeat_interleave(params.n) if params.n > 1 else None
        logits = prefill_expanded(self.decoder, ids, mask, budget, expand)
        for step in range(budget):
            tokens, logp = sample_tokens(logits, params, generator)
            if len(active) == total:  # nothing finished yet: plain column writes
                out_ids[:, step] = tokens
                out_logp[:, step] = logp
            else:
                out_ids[active, step] = tokens
                out_logp[active, step] = logp
            finished = is_stop(tokens, self.stop_ids)
            if finished.any():
                lengths[active[finished]] = step + 1
                stopped[active[finished]] = True
                keep = (~finished).nonzero().squeeze(-1)
                if keep.numel() == 0:
                    break
                active, tokens = active[keep], tokens[keep]
                self.decoder.keep(keep)
            if step + 1 < budget:
                logits = self.decoder.step(tokens)

        response_mask = response_mask_from_lengths(out_ids, lengths)
        out_ids = out_ids.masked_fill(response_mask == 0, self.pad_id)
        width = int(lengths.max())
        prompt_index = torch.arange(len(prompts)).repeat_interleave(params.n)
        return Generation(
            prompt_index=prompt_index,
            response_ids=out_ids[:, :width].cpu(),
            response_mask=response_mask[:, :width].cpu(),
            log_probs=(out_logp * response_mask)[:, :width].cpu(),
            stopped=stopped.cpu(),
            version=self.version,
        )
