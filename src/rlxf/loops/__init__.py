"""The controllers, by name: ``loop: rl`` (the default) in a recipe picks ``train_rl``.

A loop is a function ``(config, resume, write) -> summary dict``; adding one is a function in its own
file plus one ``LOOPS.register`` line, and a ``LOOP_NEEDS`` entry when it cannot run with every
engine, runtime and backend: the config refuses an unsupported pair at load, naming both settings.
"""

from __future__ import annotations

from dataclasses import dataclass

from rlxf.registry import Registry

# name -> module that registers it; imported on first use so `import rlxf` stays light.
LOOP_MODULES = {
    "rl": "rlxf.loops.rl",
    "rl_async": "rlxf.loops.rl_async",
    "sft": "rlxf.loops.sft_loop",
    "dpo": "rlxf.loops.dpo",
    "online_dpo": "rlxf.loops.online_dpo",
    "reward_model": "rlxf.loops.reward_model",
}


LOOPS: Registry = Registry("loop", modules=LOOP_MODULES)


@dataclass(frozen=True)
class LoopNeeds:
    """What a loop needs of the rest of the config (None: any value works)."""

    rollout_capabilities: frozenset[str] = frozenset()  # RolloutEngine.capabilities the engine must have
    runtimes: frozenset[str] | None = None  # runtime.kind values it runs under
    backends: frozenset[str] | None = None  # train.backend values it trains with
    multi_turn: bool = True  # env.name (multi-turn environments) supported
    dynamic_sampling: bool = True  # algorithm.dynamic_sampling supported
    greedy_baseline: bool = True  # estimators that need a greedy rollout (ReMax) supported
    why: str = ""  # said in every refusal


# The offline loops (and online DPO, which runs on them) train one model in this process with the
# single-process engine.
_OFFLINE = LoopNeeds(runtimes=frozenset({"embedded"}), backends=frozenset({"single"}),
                     why="it trains one model in this process")
LOOP_NEEDS: dict[str, LoopNeeds] = {
    "rl": LoopNeeds(),
    "rl_async": LoopNeeds(
        rollout_capabilities=frozenset({"interruptible"}), multi_turn=False, dynamic_sampling=False,
        greedy_baseline=False, why="its producer pauses generation between decode steps to load new weights",
    ),
    "sft": _OFFLINE,
    "dpo": _OFFLINE,
    "reward_model": _OFFLINE,
    "online_dpo": _OFFLINE,  # samples its pairs itself, but trains through the offline loop (one process)
}


# The key that counts a loop's steps (``--resume`` compares it with the checkpoint's step; ``rlxf train``
# refuses ``train.steps`` for a loop that counts with another key rather than ignore it).
STEPS_KEYS: dict[str, str] = {
    "rl": "train.steps",
    "rl_async": "train.steps",
    "sft": "sft.steps",
    "dpo": "preference.steps",
    "reward_model": "preference.steps",
    "online_dpo": "preference.steps",
}


def steps_key(loop: str) -> str:
    return STEPS_KEYS.get(loop, "train.steps")


def steps_of(config) -> int:
    """How many steps ``config``'s loop runs (the value of its :func:`steps_key`)."""
    section, key = steps_key(config.loop).split(".")
    return getattr(getattr(config, section), key)


def get_loop(name: str):
    return LOOPS.get(name)
