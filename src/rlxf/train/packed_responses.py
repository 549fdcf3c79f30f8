"""A micro-batch packed for the training pass: each distinct prompt once, then the responses of its rows
one after another in the same sequence, with no padding between them.

The padded layout computes every row's response to the micro-batch's longest (a GRPO group's samples
differ in length by 3x and more), and the shared-prompt forward (train/log_probs.py) still pads each
response to the longest. Packed, a group is one sequence::

    prompt (its real tokens) | response 1 but its last token | response 2 but its last token | ... | pad

with a block mask: the prompt is causal, each response sees the whole prompt and its own earlier tokens
(never another response), position ids restart after the prompt for every response, so each token sees
exactly the context and position it has in the padded layout and its hidden state is the same up to float
rounding. Pads (to the longest group) only see themselves. The last token of a response predicts nothing,
so it is never fed. The states that predict a row's response tokens are then gathered back into the padded
[B, R, .] layout the loss reads; positions past a row's response get zeros (their loss mask is 0).

Only transformers' ``sdpa`` and ``eager`` attention take such a mask (a boolean one, and an additive one);
other implementations (flash-attention's varlen path) are not packed here. A sliding window (Mistral) is
applied in the mask by position; a model whose layers mix windowed and full attention is not packed (one
mask serves every layer).

Attention over a packed sequence is dense: its [T, T] mask hides the pairs of different responses, but the
kernels still compute them. A group's sequence is ~n times one sample's, so attention costs ~n times more
than padded rows': small next to the projections and MLPs for short responses, the larger part for long
ones. :func:`forward_flops` counts both, and the caller packs only when that is cheaper.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch.nn.utils.rnn import pad_sequence

from rlxf.train.precision import CPU_AUTOCAST_ATTENTION

# attention implementations that read a custom 4D mask: how each wants it (CPU_AUTOCAST_ATTENTION is SDPA
# in fp32 under CPU autocast)
_MASK_KINDS = {"sdpa": "bool", CPU_AUTOCAST_ATTENTION: "bool", "eager": "additive"}


def mask_kind(model: torch.nn.Module) -> str | None:
    """How ``model``'s attention takes a 4D mask ('bool' or 'additive'), or None if it does not."""
    implementation = getattr(getattr(model, "config", None), "_attn_implementation", None)
    return _MASK_KINDS.get(implementation)


def forward_flops(config, tokens: int, pairs: int) -> float:
    """FLOPs of a Llama-family decoder's forward over ``tokens`` positions whose attention kernels compute
    ``pairs`` (query, key) pairs (masked ones included), its LM head left out."""
    heads = config.num_attention_heads
    head_dim = getattr(config, "head_dim", None) or config.hidden_size // heads
    kv_heads = getattr(config, "num_key_value_heads", None) or heads
    per_token = 2 * config.hidden_size * (2 * heads + 2 * kv_heads) * head_dim + 6 * config.hidden_size * config.intermediate_size
    per_pair = 4 * heads * head_dim  # scores and the weighted sum of values
    return config.num_hidden_layers * (tokens * per_token + pairs * per_pair)


@dataclass
class PackedLayout:
    """One packed sequence per distinct prompt, and where each row's states are found in it."""

    input_ids: torch.Tensor  # [U, T]
    position_ids: torch.Tensor  # [U, T]
    segments: torch.Tensor  # [U, T]: 0 prompt, s >= 1 the s-th response of the sequence, -1 padding
    keep: int  # how many of the last positions hold states the rows need
    gather: torch.Tensor  # [B * R] into the kept states flattened [U * keep], plus one zero row at U * keep

    def flops(self, config) -> float:
        """The packed forward's FLOPs (``forward_flops``): every position, every pair of its dense attention."""
        groups, width = self.input_ids.shape
        return forward_flops(config, groups * width, groups * width * width)

    def attention_mask(self, kind: str, dtype: torch.dtype, window: int | None = None) -> torch.Tensor:
        """[U, 1, T, T]: a query sees the prompt's keys up to itself and its own response's (within ``window``
        positions of its own, a sliding window's); pads see themselves."""
        seg = self.segments
        width = seg.shape[1]
        query, key = seg[:, :, None], seg[:, None, :]
        causal = torch.ones(width, width, dtype=torch.bool, device=seg.device).tril()
        allowed = causal & (((key == 0) & (query >= 0)) | ((key == query) & (query > 0)))
        if window is not None:  # transformers' sliding window: key position > query position - window
            allowed &= self.position_ids[:, None, :] > self.position_ids[:, :, None] - window
        allowed |= torch.eye(width, dtype=torch.bool, device=seg.device)  # a pad query is never left empty
        allowed = allowed[:, None]
        if kind == "bool":
            return allowed
        return torch.zeros(allowed.shape, dtype=dtype, device=seg.device).masked_fill_(~allowed, torch.finfo(dtype).min)

    def unpack(self, states: torch.Tensor, rows: int, response_width: int) -> torch.Tensor:
        """[U, keep, D] states of the packed forward -> [rows, response_width, D] in the padded layout."""
        flat = states.reshape(-1, states.shape[-1])
        flat = torch.cat([flat, flat.new_zeros(1, flat.shape[1])])
        return flat.index_select(0, self.gather).view(rows, response_width, -1)


def pack(
    input_ids: torch.Tensor, attention_mask: torch.Tensor, response_width: int, inverse: torch.Tensor
) -> PackedLayout | None:
    """The packed layout of a micro-batch whose rows are a prompt (any padding) followed by a right-padded
    response of ``response_width`` columns; ``inverse`` [B] numbers each row's distinct prompt (rows with the
    same number share the prompt). None when a response's mask is not a prefix, or a prompt is empty (its
    state that predicts the first response token does not exist): nothing to pack safely."""
    batch, width = input_ids.shape
    prompt_width = width - response_width
    response_mask = attention_mask[:, prompt_width:].bool()
    lengths = response_mask.sum(1)
    if not torch.equal(response_mask, torch.arange(response_width, device=lengths.device) < lengths[:, None]):
        return None
    if not bool(attention_mask[:, :prompt_width].any(1).all()):
        return None
    inverse_list, length_list = inverse.tolist(), lengths.tolist()
    groups = max(inverse_list) + 1
    members: list[list[int]] = [[] for _ in range(groups)]
    for row, group in enumerate(inverse_list):
        members[group].append(row)
    sequences, segments, positions, prompt_lengths = [], [], [], []
    # (sequence, position in it) of the state that predicts each row's first response token, and of its others
    first_state, rest_start = [0] * batch, [0] * batch
    for group, rows in enumerate(members):
        prompt = input_ids[rows[0], :prompt_width][attention_mask[rows[0], :prompt_width].bool()]
        length = prompt.numel()
        prompt_lengths.append(length)
        parts, segment, position = [prompt], [torch.zeros(length, dtype=torch.long)], [torch.arange(length)]
        offset = length
        for number, row in enumerate(rows, start=1):
            fed = max(length_list[row] - 1, 0)  # the last response token predicts nothing
            parts.append(input_ids[row, prompt_width:prompt_width + fed])
            segment.append(torch.full((fed,), number, dtype=torch.long))
            position.append(torch.arange(length, length + fed))
            first_state[row], rest_start[row] = (group, length - 1), offset
            offset += fed
        sequences.append(torch.cat(parts))
        segments.append(torch.cat(segment))
        positions.append(torch.cat(position))
    device = input_ids.device
    packed_ids = pad_sequence(sequences, batch_first=True)  # right-padded to the longest sequence
    packed_positions = pad_sequence(positions, batch_first=True).to(device)
    packed_segments = pad_sequence(segments, batch_first=True, padding_value=-1).to(device)
    total = packed_ids.shape[1]
    keep = total - min(prompt_lengths) + 1
    zero_row, first_kept = groups * keep, total - keep
    gather = torch.full((batch, response_width), zero_row, dtype=torch.long)
    for row in range(batch):
        if length_list[row] == 0:
            continue
        group, last_prompt = first_state[row]
        gather[row, 0] = group * keep + last_prompt - first_kept
        start = group * keep + rest_start[row] - first_kept
        gather[row, 1:length_list[row]] = torch.arange(start, start + length_list[row] - 1)
    return PackedLayout(packed_ids, packed_positions, packed_segments, keep, gather.view(-1).to(device))
