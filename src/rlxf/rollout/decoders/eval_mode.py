"""Generation and evaluation run in eval mode even when the trainer left the shared model training."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

import torch


@contextmanager
def eval_mode(model: torch.nn.Module) -> Iterator[torch.nn.Module]:
    """``model.eval()`` inside, the previous mode restored after (dropout off while sampling)."""
    was_training = model.training
    model.eval()
    try:
        yield model
    finally:
        model.train(was_training)
