"""The input embedding's gradient as the rows a micro-batch used, not a dense [vocab, hidden] matrix.

``nn.Embedding``'s backward zeroes a dense [V, H] matrix and adds each token's gradient row into it.
For SmolLM2-135M (V 49,152, H 576) that is 113 MB zeroed and written for a few hundred rows, twice per
micro-batch on the shared-prompt path (the prompts' forward and the responses' forward each embed):
~50-120 ms a time on the 2-core CPU of ../shared/FIELD.md, about a tenth of a bf16 update. With
``sparse=True`` the backward returns just those rows. Where the embedding is tied to the LM head
(SmolLM2, Qwen2.5-0.5B, Llama 3.2 1B/3B) autograd adds them into the head's dense gradient, so
``.grad`` is dense as before; an untied embedding's ``.grad`` stays sparse over the micro-batches and is
made dense once per optimizer step (``densify_sparse_grads``) before clipping and AdamW, which take dense
gradients only. The sums are the same up to float rounding (rows added in another order).

Only the single-process engine uses it: FSDP2 and DeepSpeed reduce dense gradients.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterable, Iterator

import torch


@contextlib.contextmanager
def sparse_embedding_grads(model: torch.nn.Module) -> Iterator[None]:
    """Every trainable ``nn.Embedding`` of ``model`` returns sparse gradients inside the block."""
    switched = [
        module for module in model.modules()
        if isinstance(module, torch.nn.Embedding) and not module.sparse and module.weight.requires_grad
    ]
    for module in switched:
        module.sparse = True
    try:
        yield
    finally:
        for module in switched:
            module.sparse = False


def densify_sparse_grads(params: Iterable[torch.Tensor]) -> None:
    """Replace each sparse ``.grad`` (an untied embedding's) by its dense sum."""
    for param in params:
        if param.grad is not None and param.grad.is_sparse:
            param.grad = param.grad.to_dense()
