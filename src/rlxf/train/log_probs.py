"""Per-token log-probs (and entropy) of response tokens under a causal LM, from one forward pass.

Position ids follow the attention mask (``cumsum - 1``) so a left-padded prompt is seen exactly as
the rollout engine saw it. Logits are divided by the sampling temperature, matching what the rollout
engine records (``rollout/sampling.py``). Only the last ``R + 1`` positions go through the LM head;
with ``chunk_tokens`` only the response tokens, a chunk at a time (train/chunked_head.py).

Shared prompts. The ``n`` samples of a prompt (a GRPO group) share their prompt, so when a batch
holds the same prompt more than once (Llama-family models) the prompt goes through the model once:
one forward over the distinct prompts builds their KV cache, the cache is gathered out to every row
(a differentiable index, so the prompt's gradient sums over its samples) and a second forward runs
the response tokens against it. Same logits as the full forward up to float rounding, fewer FLOPs
by ``(B - U) x P`` tokens (``U`` distinct prompts of width ``P``), in training and no-grad passes alike.
"""

from __future__ import annotations

import inspect

import torch

from rlxf.batch import position_ids_from_mask
from rlxf.config_error import ConfigError
from rlxf.models.attention_window import mixes_windows, sliding_window
from rlxf.train.chunked_head import chunked_head_log_probs, lm_head_parameters
from rlxf.train.data_parallel import all_ranks_agree
from rlxf.train.packed_responses import forward_flops, mask_kind, pack

# Architectures whose transformers forward takes a gathered DynamicCache with gradients (the shared
# prompt path); any other model runs the plain full forward.
SHARED_PREFIX_MODEL_TYPES = frozenset({"llama", "qwen2", "mistral"})
# Architectures whose transformers forward honours a custom 4D mask with position ids (the packed path)
PACKED_MODEL_TYPES = SHARED_PREFIX_MODEL_TYPES


def response_logits(
    model: torch.nn.Module, input_ids: torch.Tensor, attention_mask: torch.Tensor, response_width: int
) -> torch.Tensor:
    """[B, R, V] logits that predict the R response tokens (positions P-1 .. P+R-2)."""
    return _response_states(model, None, input_ids, attention_mask, response_width)


def response_hidden_states(
    model: torch.nn.Module, input_ids: torch.Tensor, attention_mask: torch.Tensor, response_width: int
) -> torch.Tensor:
    """[B, R, H] final hidden states (what the LM head reads) at the positions ``response_logits``
    covers, from the model's decoder alone: the head is left to the caller (train/chunked_head.py)."""
    return _response_states(model, decoder_of(model), input_ids, attention_mask, response_width)


def decoder_response_states(
    decoder: torch.nn.Module, input_ids: torch.Tensor, attention_mask: torch.Tensor, response_width: int
) -> torch.Tensor:
    """``response_hidden_states`` of a bare decoder with no LM head above it (PPO's critic trunk, which a
    value head reads), each distinct prompt computed once as for the policy."""
    return _response_states(decoder, decoder, input_ids, attention_mask, response_width)


def decoder_of(model: torch.nn.Module) -> torch.nn.Module:
    """The module whose ``last_hidden_state`` the LM head reads (HF ``get_decoder``; through peft too)."""
    decoder = model.get_decoder() if hasattr(model, "get_decoder") else None
    if decoder is None or decoder is model or (hasattr(model, "get_base_model") and decoder is model.get_base_model()):
        raise ConfigError(f"train.logits_chunk_tokens: {type(model).__name__} has no separate decoder "
                          "(get_decoder()) to take hidden states from; set train.logits_chunk_tokens=0")
    return decoder


def _run(model: torch.nn.Module, decoder: torch.nn.Module | None, keep: int | None, **inputs):
    """(the last ``keep`` positions' logits in fp32 (``decoder`` None) or hidden states, the output)."""
    if decoder is None:
        out = model(**inputs, **({"logits_to_keep": keep} if keep else {}))
        return out.logits.float(), out
    out = decoder(**inputs)
    states = out.last_hidden_state
    return (states[:, -keep:] if keep else states), out


def _response_states(
    model: torch.nn.Module, decoder: torch.nn.Module | None, input_ids: torch.Tensor,
    attention_mask: torch.Tensor, response_width: int,
) -> torch.Tensor:
    packed = _packed_states(model, decoder, input_ids, attention_mask, response_width)
    if packed is not None:
        return packed
    shared = _shared_prompt_states(model, decoder, input_ids, attention_mask, response_width)
    if shared is not None:
        return shared
    states, _ = _run(model, decoder, response_width + 1, input_ids=input_ids, attention_mask=attention_mask,
                     position_ids=position_ids_from_mask(attention_mask), use_cache=False)
    return states[:, :-1]


def distinct_prompts(
    input_ids: torch.Tensor, attention_mask: torch.Tensor, prompt_width: int
) -> tuple[torch.Tensor, torch.Tensor]:
    """(rows [U] holding each distinct prompt once, inverse [B] the distinct prompt of every row)."""
    key = torch.cat([input_ids[:, :prompt_width], attention_mask[:, :prompt_width]], dim=1)
    _, inverse = torch.unique(key, dim=0, return_inverse=True)
    first = torch.full((int(inverse.max()) + 1,), len(inverse), dtype=torch.long, device=inverse.device)
    first.scatter_reduce_(0, inverse, torch.arange(len(inverse), device=inverse.device), reduce="amin")
    return first, inverse


def _cache_argument(model: torch.nn.Module) -> str:
    """transformers renamed ``past_key_values`` to ``cache`` (forward argument and output field)."""
    name = type(model).__name__
    if name not in _CACHE_ARGUMENT:
        parameters = inspect.signature(type(model).forward).parameters
        _CACHE_ARGUMENT[name] = "cache" if "cache" in parameters else "past_key_values"
    return _CACHE_ARGUMENT[name]


_CACHE_ARGUMENT: dict[str, str] = {}


def _checkpointing(model: torch.nn.Module) -> bool:
    # transformers 5 renamed is_gradient_checkpointing (the old name warns on every access)
    for name in ("is_activation_checkpointing", "is_gradient_checkpointing"):
        if hasattr(type(model), name):
            return bool(getattr(model, name))
    return False


def _shares_prompts(model: torch.nn.Module, batch: int, distinct: int, prompt_width: int) -> bool:
    """Whether the shared-prompt forward runs: a Llama-family model not recomputing activations
    (transformers then drops the cache), prompts of 2 columns or more, and at most half as many distinct
    prompts as rows."""
    return (
        getattr(getattr(model, "config", None), "model_type", None) in SHARED_PREFIX_MODEL_TYPES
        and not _checkpointing(model)
        and prompt_width >= 2
        and 2 * distinct <= batch
    )


def _packed_states(
    model: torch.nn.Module, decoder: torch.nn.Module | None, input_ids: torch.Tensor,
    attention_mask: torch.Tensor, response_width: int,
) -> torch.Tensor | None:
    """``_response_states`` from one forward over the packed micro-batch (train/packed_responses.py): each
    distinct prompt once and no padding between responses; None where packing computes no fewer FLOPs
    than the path that would run otherwise, or the model cannot take the packed mask."""
    batch, width = input_ids.shape
    prompt_width = width - response_width
    config, kind = getattr(model, "config", None), mask_kind(model)
    layout = None
    if (
        kind is not None and prompt_width >= 1 and response_width >= 1
        and getattr(config, "model_type", None) in PACKED_MODEL_TYPES and not mixes_windows(config)
    ):
        rows, inverse = distinct_prompts(input_ids, attention_mask, prompt_width)
        layout = pack(input_ids, attention_mask, response_width, inverse)
        if _shares_prompts(model, batch, len(rows), prompt_width):  # the prompts once, then every row's padded responses
            distinct, fed = len(rows), response_width - 1
            otherwise = forward_flops(config, distinct * prompt_width + batch * fed,
                                      distinct * prompt_width**2 + batch * fed * (prompt_width + fed))
        else:
            otherwise = forward_flops(config, batch * width, batch * width**2)
        layout = layout if layout is not None and layout.flops(config) < otherwise else None
    # data-parallel ranks run the same passes (FSDP gathers the weights once per forward)
    if not all_ranks_agree(layout is not None):
        return None
    dtype = next(model.parameters()).dtype
    states, _ = _run(model, decoder, layout.keep, input_ids=layout.input_ids,
                     attention_mask=layout.attention_mask(kind, dtype, sliding_window(config)),
                     position_ids=layout.position_ids,
                     use_cache=False)
    return layout.unpack(states, batch, response_width)


def _shared_prompt_states(
    model: torch.nn.Module, decoder: torch.nn.Module | None, input_ids: torch.Tensor,
    attention_mask: torch.Tensor, response_width: int,
) -> torch.Tensor | None:
    """``_response_states`` with each distinct prompt computed once; None when that cannot pay."""
    batch, prompt_width = input_ids.shape[0], input_ids.shape[1] - response_width
    shareable = batch >= 2 and prompt_width >= 2 and response_width >= 1
    rows, inverse = distinct_prompts(input_ids, attention_mask, prompt_width) if shareable else (None, None)
    # Mostly distinct prompts: the plain forward is as cheap. Data-parallel ranks decide together:
    # FSDP gathers the weights once per forward, so every rank must run the same passes.
    if not all_ranks_agree(shareable and _shares_prompts(model, batch, len(rows), prompt_width)):
        return None
    position_ids = position_ids_from_mask(attention_mask)
    first, prompt = _run(
        model, decoder, 1,
        input_ids=input_ids[rows, :prompt_width],
        attention_mask=attention_mask[rows, :prompt_width],
        position_ids=position_ids[rows, :prompt_width],
        use_cache=True,
    )
    first = first[inverse]  # [B, 1, .]: predicts response token 0
    if response_width == 1:
        return first
    cache_arg = _cache_argument(decoder if decoder is not None else model)
    cache = getattr(prompt, cache_arg, None)
    if cache is None or not hasattr(cache, "batch_select_indices"):
        return None
    cache.batch_select_indices(inverse)
    end = input_ids.shape[1] - 1  # the last response token predicts nothing
    rest, _ = _run(
        model, decoder, None,
        input_ids=input_ids[:, prompt_width:end],
        attention_mask=attention_mask[:, :end],
        position_ids=position_ids[:, prompt_width:end],
        use_cache=True,
        **{cache_arg: cache},
    )
    return torch.cat([first, rest], dim=1)


def token_log_probs(logits: torch.Tensor, tokens: torch.Tensor, temperature: float = 1.0) -> torch.Tensor:
    if temperature not in (0.0, 1.0):
        logits = logits / temperature
    return logits.log_softmax(-1).gather(-1, tokens[..., None]).squeeze(-1)


def entropy_from_logits(logits: torch.Tensor, temperature: float = 1.0) -> torch.Tensor:
    if temperature not in (0.0, 1.0):
        logits = logits / temperature
    log_p = logits.log_softmax(-1)
    return -(log_p.exp() * log_p).sum(-1)


def response_token_log_probs(
    model: torch.nn.Module,
    input_ids: torch.Tensor,
    attention_mask: torch.Tensor,
    response_ids: torch.Tensor,
    mask: torch.Tensor,
    temperature: float = 1.0,
    with_entropy: bool = False,
    entropy_grad: bool = True,
    chunk_tokens: int = 0,
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """(log-probs [B, R], entropy [B, R] or None) of the response tokens, zero where ``mask`` is 0.

    ``chunk_tokens`` 0: the [B, R, V] logits at once. Otherwise only the tokens under ``mask`` go
    through the LM head, ``chunk_tokens`` at a time, forward and backward (train/chunked_head.py):
    the same numbers without the logits' memory. ``entropy_grad`` False: entropy for metrics only."""
    if not chunk_tokens:
        logits = response_logits(model, input_ids, attention_mask, response_ids.shape[1])
        mask = mask.float()
        log_probs = token_log_probs(logits, response_ids, temperature) * mask
        if not with_entropy:
            return log_probs, None
        return log_probs, entropy_from_logits(logits if entropy_grad else logits.detach(), temperature) * mask
    hidden = response_hidden_states(model, input_ids, attention_mask, response_ids.shape[1])
    weight, bias = lm_head_parameters(model)
    keep = mask.bool()
    log_probs, entropy = chunked_head_log_probs(
        hidden[keep], weight, bias, response_ids[keep], chunk_tokens, temperature, with_entropy
    )
    zeros = torch.zeros(mask.shape, dtype=log_probs.dtype, device=log_probs.device)
    if entropy is not None and not entropy_grad:
        entropy = entropy.detach()
    return zeros.index_put((keep,), log_probs), None if entropy is None else zeros.index_put((keep,), entropy)


def sequence_log_probs(
    model: torch.nn.Module,
    prompt_ids: torch.Tensor,
    prompt_mask: torch.Tensor,
    response_ids: torch.Tensor,
    response_mask: torch.Tensor,
    temperature: float = 1.0,
    with_entropy: bool = False,
    chunk_tokens: int = 0,
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """(log-probs [B, R], entropy [B, R] or None); zero where ``response_mask`` is 0."""
    input_ids = torch.cat([prompt_ids, response_ids], dim=1)
    attention_mask = torch.cat([prompt_mask, response_mask], dim=1)
    return response_token_log_probs(model, input_ids, attention_mask, response_ids, response_mask, temperature,
                                    with_entropy, chunk_tokens=chunk_tokens)


def pad_columns(values: torch.Tensor, width: int) -> torch.Tensor:
    """Right-pad [B, r] with zeros to [B, width] (micro-batches are trimmed to their longest response)."""
    if values.shape[1] == width:
        return values
    return torch.nn.functional.pad(values, (0, width - values.shape[1]))


@torch.no_grad()
def batch_log_probs(
    model: torch.nn.Module, batch, micro_batch_size: int, temperature: float = 1.0, chunk_tokens: int = 0
) -> torch.Tensor:
    """[B, R] log-probs of every response token of ``batch``, micro-batch by micro-batch, no grad
    (``chunk_tokens``: the LM head that many tokens at a time, ``response_token_log_probs``)."""
    from rlxf.train.micro_batches import micro_batches

    was_training = model.training
    model.eval()
    width = batch.response_ids.shape[1]
    parts = []
    for micro in micro_batches(batch, micro_batch_size):
        log_probs, _ = sequence_log_probs(
            model, micro.prompt_ids, micro.prompt_mask, micro.response_ids, micro.response_mask, temperature,
            chunk_tokens=chunk_tokens,
        )
        parts.append(pad_columns(log_probs, width))
    model.train(was_training)
    return torch.cat(parts)
