"""``save_pretrained`` without the DeepSpeed import it otherwise costs.

transformers' ``save_pretrained`` unwraps the model through accelerate's ``extract_model_from_parallel``,
which imports DeepSpeed whenever it is installed, to check ``isinstance(model, DeepSpeedEngine)``; DeepSpeed
in turn imports mlflow and FastAPI: about 1,300 modules, +56 MB of heap and +33 MB of mapped files in the
process (measured on the default model's first checkpoint), for a check that cannot succeed when
DeepSpeed was never imported (no object can be an instance of a class that does not exist yet). So
while DeepSpeed is not imported, the check is skipped; a run on the ``deepspeed`` backend has imported
it and is unwrapped as before.
"""

from __future__ import annotations

import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import torch


@contextmanager
def _deepspeed_unwrap_skipped() -> Iterator[None]:
    try:
        from accelerate.utils import other
    except ImportError:  # no accelerate: transformers unwraps by itself, no DeepSpeed import
        yield
        return
    if "deepspeed" in sys.modules or not hasattr(other, "is_deepspeed_available"):
        yield
        return
    original = other.is_deepspeed_available
    other.is_deepspeed_available = lambda: False
    try:
        yield
    finally:
        other.is_deepspeed_available = original


def save_model(model: torch.nn.Module, folder: str | Path, state_dict: dict[str, torch.Tensor] | None = None) -> None:
    """``model.save_pretrained(folder)`` (``state_dict``: the weights to write instead of the model's own)."""
    with _deepspeed_unwrap_skipped():
        model.save_pretrained(folder, state_dict=state_dict)


TOKENIZER_BYTES = 1 << 20  # a character tokenizer's files and the configs (a few kB), counted generously


def weight_bytes(model: torch.nn.Module) -> int:
    """Bytes of ``model``'s weights as saved (a tensor tied to another counted once)."""
    seen, total = set(), 0
    for tensor in model.state_dict().values():
        key = (tensor.untyped_storage().data_ptr(), tensor.storage_offset())
        if key not in seen:
            seen.add(key)
            total += tensor.numel() * tensor.element_size()
    return total
