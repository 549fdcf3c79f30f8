"""The reference rollout engine: transformers' ``generate``, for comparison and for any architecture.

Generation-config policy (the same as the built-in engine's): samples come from ``rollout.*`` alone
(temperature, top_p, top_k); the checkpoint's ``generation_config`` contributes only its stop tokens
(``eos_token_id``, through ``eos_id``). Its logits processors (``repetition_penalty``, its own
temperature...) are not applied, so the recorded log-probs are those of the distribution sampled from
and the trainer recomputes the same numbers. Generation runs in eval mode (no dropout).
"""

from __future__ import annotations

import torch
from transformers import GenerationConfig

from rlxf.batch import left_pad
from rlxf.rollout.decoders.eval_mode import eval_mode
from rlxf.rollout.engine import ROLLOUT_ENGINES
from rlxf.rollout.generation import Generation, response_mask_from_lengths
from rlxf.rollout.sampling import SamplingParams
from rlxf.rollout.stops import is_stop, stop_id_list, stop_ids_tensor


@ROLLOUT_ENGINES.register("hf")
class HFGenerateEngine:
    capabilities: frozenset[str] = frozenset()  # generate() runs to the end: not interruptible

    def __init__(self, model: torch.nn.Module, eos_id: int | list[int], pad_id: int) -> None:
        self.model = model
        self.eos_id = eos_id
        self.pad_id = pad_id
        self.version = 0
        self.device = next(model.parameters()).device
        self.stop_ids = stop_ids_tensor(eos_id, self.device)

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
        # A fresh config: none of the checkpoint's own processors (see the module docstring).
        generation_config = GenerationConfig(
            max_new_tokens=params.max_new_tokens, num_return_sequences=params.n, do_sample=not params.greedy,
            eos_token_id=stop_id_list(self.eos_id), pad_token_id=self.pad_id,
            output_logits=True, return_dict_in_generate=True,
            **({} if params.greedy else {"temperature": params.temperature, "top_p": params.top_p, "top_k": params.top_k or None}),
        )
        # generate() fills unset fields from model.generation_config: hide the checkpoint's meanwhile.
        checkpoint_config, self.model.generation_config = self.model.generation_config, GenerationConfig()
        try:
            with eval_mode(self.model):
                out = self.model.generate(input_ids=ids, attention_mask=mask, generation_config=generation_config)
        finally:
            self.model.generation_config = checkpoint_config
        response = out.sequences[:, ids.shape[1]:]
        logits = torch.stack(out.logits, dim=1).float()
        scale = 1.0 if params.greedy else params.temperature
        log_probs = (logits / scale).log_softmax(-1).gather(-1, response[..., None]).squeeze(-1)
        is_eos = is_stop(response, self.stop_ids)
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
