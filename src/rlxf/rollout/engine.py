"""What every rollout engine provides, and what it returns."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Protocol

import torch

from rlxf.config_error import ConfigError
from rlxf.registry import Registry
from rlxf.rollout.generation import Generation
from rlxf.rollout.sampling import SamplingParams

if TYPE_CHECKING:
    from rlxf.rollout.interruptible import InterruptibleGeneration


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


def build_engine(
    name: str, model: torch.nn.Module, eos_id: int, pad_id: int, options: dict[str, Any] | None = None
) -> RolloutEngine:
    """The engine registered as ``name``; ``options`` (``rollout.engine_options``) go to its constructor."""
    engine_cls = ROLLOUT_ENGINES.get(name)
    if options:
        try:
            return engine_cls(model=model, eos_id=eos_id, pad_id=pad_id, **options)
        except ConfigError:
            raise
        except TypeError as error:
            if "unexpected keyword argument" not in str(error):
                raise
            raise EngineOptionsError(f"rollout.engine_options {sorted(options)} are not options of engine {name!r}: "
                                     f"{error}") from None
        except ValueError as error:  # a value the engine refuses (a dtype it does not know): the user's, named
            raise EngineOptionsError(f"rollout.engine_options {options} of engine {name!r}: {error}") from error
    return engine_cls(model=model, eos_id=eos_id, pad_id=pad_id)


class EngineOptionsError(ConfigError, TypeError):
    """``rollout.engine_options`` that the engine does not take, or a value it refuses (a TypeError still, as
    an unexpected keyword is)."""


def engine_options_problem(name: str, options: dict[str, Any]) -> str | None:
    """An option engine ``name`` does not take, or of the wrong type, named (checked when the recipe loads)."""
    from rlxf.registry import keyword_problem

    return keyword_problem(ROLLOUT_ENGINES.get(name), options, "rollout.engine_options",
                           skip=("model", "eos_id", "pad_id"))
