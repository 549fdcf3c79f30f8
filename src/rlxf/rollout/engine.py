"""What every rollout engine provides, and what it returns."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

import torch

from rlxf.registry import Registry
from rlxf.rollout.sampling import SamplingParams

if TYPE_CHECKING:
    from rlxf.rollout.interruptible import InterruptibleGeneration


@dataclass
class Generation:
    """``n`` responses for each of ``len(prompts)`` prompts; row ``i * n + j`` is sample j of prompt i.

    ``response_ids`` [N, R] right-padded with ``pad_id``; ``response_mask`` [N, R] 1 up to and
    including the end-of-sequence token; ``log_probs`` [N, R] of the sampling policy (0 on padding);
    ``stopped`` [N] True where the model emitted end-of-sequence within the budget;
    ``prompt_index`` [N] the prompt each row answers; ``version`` the policy version that sampled it.
    """

    prompt_index: torch.Tensor
    response_ids: torch.Tensor
    response_mask: torch.Tensor
    log_probs: torch.Tensor
    stopped: torch.Tensor
    version: int


class RolloutEngine(Protocol):
    """What every engine provides (``loop: rl`` and the offline loops' evaluation need no more).

    ``capabilities`` names the optional parts an engine has; a loop that needs one says so
    (``rlxf.loops.LOOP_NEEDS``) and the config refuses an engine without it at load:

    * ``"interruptible"`` — ``start_interruptible(params)`` (:class:`InterruptibleEngine`): generation
      that pauses between decode steps, loads new weights and resumes (``loop: rl_async``).
    """

    version: int
    device: torch.device  # where the engine's sampling generator must live
    eos_id: int
    pad_id: int
    capabilities: frozenset[str]

    def generate(
        self, prompts: list[list[int]], params: SamplingParams, generator: torch.Generator | None = None
    ) -> Generation: ...

    def update_weights(self, state_dict: dict[str, torch.Tensor], version: int) -> None: ...


INTERRUPTIBLE = "interruptible"


class InterruptibleEngine(RolloutEngine, Protocol):
    def start_interruptible(self, params: SamplingParams) -> InterruptibleGeneration:
        """An empty generation over the engine's decoder at its current version; rows are admitted later."""
        ...


# name -> module that registers it (imported on first use: optional dependencies stay unimported)
ROLLOUT_ENGINE_MODULES = {
    "torch": "rlxf.rollout.torch_engine",
    "hf": "rlxf.rollout.hf_engine",
    "vllm": "rlxf.rollout.vllm_engine",
}
ROLLOUT_ENGINES: Registry = Registry("rollout engine", modules=ROLLOUT_ENGINE_MODULES)


def engine_capabilities(name: str) -> frozenset[str]:
    """What engine ``name`` can do beyond the protocol (its class's ``capabilities``), without building it."""
    return ROLLOUT_ENGINES.get(name).capabilities


def left_pad(prompts: list[list[int]], pad_id: int, device: torch.device) -> tuple[torch.Tensor, torch.Tensor]:
    """Token lists -> (ids [B, P], mask [B, P]) padded on the left."""
    width = max(len(p) for p in prompts)
    ids = torch.full((len(prompts), width), pad_id, dtype=torch.long)
    mask = torch.zeros((len(prompts), width), dtype=torch.long)
    for row, tokens in enumerate(prompts):
        if tokens:
            ids[row, width - len(tokens):] = torch.tensor(tokens, dtype=torch.long)
            mask[row, width - len(tokens):] = 1
    return ids.to(device), mask.to(device)


def response_mask_from_lengths(response_ids: torch.Tensor, lengths: torch.Tensor) -> torch.Tensor:
    """1 on positions < length (length counts the EOS token when there is one)."""
    positions = torch.arange(response_ids.shape[1], device=response_ids.device)
    return (positions[None, :] < lengths[:, None]).long()


def build_engine(
    name: str, model: torch.nn.Module, eos_id: int, pad_id: int, options: dict[str, Any] | None = None
) -> RolloutEngine:
    """The engine registered as ``name``; ``options`` (``rollout.engine_options``) go to its constructor."""
    engine_cls = ROLLOUT_ENGINES.get(name)
    if options:
        try:
            return engine_cls(model=model, eos_id=eos_id, pad_id=pad_id, **options)
        except TypeError as error:
            if "unexpected keyword argument" not in str(error):
                raise
            raise TypeError(f"rollout.engine_options {sorted(options)} are not options of engine {name!r}: {error}") from None
    return engine_cls(model=model, eos_id=eos_id, pad_id=pad_id)
