"""Train engines by name (``train.backend``): ``single`` (one process), ``fsdp2``, ``deepspeed``, ``tp``
(tensor parallelism, alone or with FSDP2 on a 2-D mesh).

Every engine has the ``TrainEngine`` interface (``optimizer_step``, ``save_state``/``load_state`` in
the single-process checkpoint format), so roles and loops never ask which one they hold. Data-parallel
engines need ``torch.distributed`` initialised before they are built. Modules are imported on first
use, so DeepSpeed is only imported by a run that asks for it.
"""

from __future__ import annotations

from rlxf.registry import Registry

# name -> module that registers it
TRAIN_ENGINE_MODULES = {
    "single": "rlxf.train.engine",
    "fsdp2": "rlxf.train.fsdp_engine",
    "deepspeed": "rlxf.train.deepspeed_engine",
    "tp": "rlxf.train.tp_engine",
}
TRAIN_ENGINES: Registry = Registry("train backend", modules=TRAIN_ENGINE_MODULES)


def train_engine_class(name: str):
    return TRAIN_ENGINES.get(name)


def build_train_engine(name: str, model, cfg, **options):
    """``options`` go to the engine's constructor, e.g. ``zero_stage=3`` for ``deepspeed``."""
    return train_engine_class(name)(model, cfg, **options)
