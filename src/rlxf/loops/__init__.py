"""The controllers, by name: ``loop: rl`` (the default) in a recipe picks ``train_rl``.

A loop is a function ``(config, resume, write) -> summary dict``; adding one is a function in its own
file plus one ``LOOPS.register`` line.
"""

from __future__ import annotations

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


def get_loop(name: str):
    return LOOPS.get(name)
