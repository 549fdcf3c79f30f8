"""One KV cache of :class:`~rlxf.rollout.decoders.llama_decoder.LlamaDecoder`: rows prefilled together.

A cohort's rows share one write slot (``cur``: rows are left-padded at prefill, ``step_mask`` hides the
pads), so every step attends over ``[:cur + 1]`` of its cache. Rows that join a running generation
(continuous batching) get a cohort of their own instead of being padded out to the running rows'
length: a step then runs the linear layers once over all cohorts' rows, and each cohort's attention
reads its own cache width only. On a CPU the attention of a decode step is bound by reading the cache,
so a batch of short fresh rows padded to a long tail's width would cost several times its own work.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor


@dataclass
class KVCohort:
    kv: Tensor  # [n_layers, 2, rows cached, n_kv, L, head_dim]
    pos: Tensor  # [rows cached] position id of each row's next token
    step_mask: Tensor  # [rows cached, 1, 1, L] additive: -inf on left pads
    cur: int  # slots filled
    live: Tensor | None = None  # cached rows of the caller's rows, in order (None: all of them)

    @property
    def rows(self) -> int:
        """The caller's rows in this cohort (finished rows still cached are not counted)."""
        return self.kv.shape[2] if self.live is None else self.live.numel()

    @property
    def cached(self) -> int:
        return self.kv.shape[2]

    def keep(self, rows: Tensor) -> None:
        """Keep these of the caller's rows (indices, repeats and reorders allowed). Finished rows leave
        lazily: an in-order subset of more than half the cached rows only marks the others finished
        (they step along, their logits dropped); otherwise the live rows' filled slots are copied out.
        Copying the cache at every finish cost more than the steps it saved once rows are long, and
        halving bounds the wasted step work at 2x."""
        live = rows if self.live is None else self.live.index_select(0, rows)
        if 2 * live.numel() > self.cached and (live.numel() < 2 or bool((live[1:] > live[:-1]).all())):
            self.live = live
            return
        kv = self.kv.new_empty((*self.kv.shape[:2], live.numel(), *self.kv.shape[3:]))
        kv[:, :, :, :, : self.cur] = self.kv[:, :, :, :, : self.cur].index_select(2, live)
        self.kv, self.live = kv, None
        self.pos = self.pos.index_select(0, live)
        self.step_mask = self.step_mask.index_select(0, live)

    def scatter(self, values: Tensor) -> Tensor:
        """The caller's rows' ``values`` [rows] laid out over the cached rows (finished rows get 0)."""
        if self.live is None:
            return values
        return values.new_zeros(self.cached).index_copy_(0, self.live, values)

    def gather(self, values: Tensor) -> Tensor:
        """``values`` over the cached rows [cached, ...] -> the caller's rows."""
        return values if self.live is None else values.index_select(0, self.live)


def split_rows(rows: Tensor, cohorts: list[KVCohort]) -> list[Tensor]:
    """Indices into the caller's rows (all cohorts' rows, cohort after cohort) -> each cohort's own.
    Across several cohorts the rows must be in increasing order (dropping finished rows); reordering or
    repeating rows is for a single cohort (the ``n`` samples of a prompt, right after its prefill)."""
    if len(cohorts) == 1:
        return [rows]
    if rows.numel() > 1 and not bool((rows[1:] > rows[:-1]).all()):
        raise NotImplementedError("LlamaDecoder.keep: rows of several cohorts can only be dropped, not reordered")
    parts, start = [], 0
    for cohort in cohorts:
        end = start + cohort.rows
        parts.append(rows[(rows >= start) & (rows < end)] - start)
        start = end
    return parts


def cohort_logits(logits: Tensor, cohorts: list[KVCohort]) -> Tensor:
    """Logits over every cohort's cached rows -> the caller's rows (finished rows dropped)."""
    if all(c.live is None for c in cohorts):
        return logits
    parts, start = [], 0
    for cohort in cohorts:
        parts.append(cohort.gather(logits[start : start + cohort.cached]))
        start += cohort.cached
    return torch.cat(parts)
