"""The reference rollout engine: transformers' ``generate``, for comparison and for any architecture."""

from __future__ import annotations

import torch

from rlxf.batch import left_pad
from rlxf.rollout.engine import ROLLOUT_ENGINES
from rlxf.rollout.generation import Generation, response_mask_from_lengths
from rlxf.rollout.sampling import SamplingParams


@ROLLOUT_ENGINES.register("hf")
class HFGenerateEngine:
    capabilities: frozenset[str] = frozenset()  # generate() runs to the end: not interruptible

    def __init__(self, model: torch.nn.Module, eos_id: int, pad_id: int) -> None:
        self.model = model
        self.eos_id = eos_id
        self.pad_id = pad_id
        self.version = 0
        self.device = next(model.parameters()).device

    def update_weights(self, state_dict: dict[str, torch.Tensor], version: int) -> None:
        own = self.model.state_dict()
        if any(own[k].data_ptr() != v.data_ptr() for k, v in state_dict.items() if k in own):
            self.model.load_state_dict(state_dict, strict=False)
        self.version = version

    # no_grad, not inference_mode: the returned ids and log-probs feed autograd-tracked training.
    @torch.no_grad()
    def generate(
        self, prompts: list[list[int]], params: SamplingParams, generator: torch.Generator | None = None
    ) -> Generation:
        if generator is not None:
            # generate() samples from the global RNG; seed it from the caller's generator.
            torch.manual_seed(int(torch.randint(0, 2**31 - 1, (1,), generator=generator)))
        ids, mask = left_pad(prompts, self.pad_id, self.device)
        sampling = {} if params.greedy else {
            "do_sample": True, "temperature": params.temperature,
            "top_p": params.top_p, "top_k": params.top_k or None,
        }
        out = self.model.generate(
            input_ids=ids, attention_mask=mask, max_new_tokens=params.max_new_tokens,
            num_return_sequences=params.n, eos_token_id=self.eos_id, pad_token_id=self.pad_id,
            output_logits=True, return_dict_in_generate=True, do_sample=not params.greedy,
            **({k: v for k, v in sampling.items() if k != "do_sample"}),
        )
        response = out.sequences[:, ids.shape[1]:]
        logits = torch.stack(out.logits, dim=1).float()
        scale = 1.0 if params.greedy else params.temperature
        log_probs = (logits / scale).log_softmax(-1).gather(-1, response[..., None]).squeeze(-1)
        is_eos = response == self.eos_id
        stopped = is_eos.any(-1)
        budget = torch.full_like(stopped, response.shape[1], dtype=torch.long)
        lengths = torch.where(stopped, is_eos.float().argmax(-1) + 1, budget)
        response_mask = response_mask_from_lengths(response, lengths)
        return Generation(
            prompt_index=torch.arange(len(prompts)).repeat_interleave(params.n),
            response_ids=response.masked_fill(response_mask == 0, self.pad_id).cpu(),
            response_mask=response_mask.cpu(),
            log_probs=(log_probs * response_mask).cpu(),
            stopped=stopped.cpu(),
            version=self.version,
        )
