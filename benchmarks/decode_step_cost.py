"""What one decode step of the built-in decoder costs by rows and cache width: the fixed vs per-row split
that decides how much continuous batching can save on a machine.

    .venv/bin/python benchmarks/decode_step_cost.py [--threads 1] [--rows 1,3,8,16,64] [--widths 5,150]

The tiny Llama of the default recipe's shape (3.2M parameters, random weights). For each (rows, cache
width): a prefill of ``width`` tokens per row, then ``--steps`` decode steps; prints JSON with the
median milliseconds per step over ``--reps`` interleaved repetitions. On a GPU a step costs about the
same for 1 row as for 64 (a fixed cost); on this 2-core CPU it grows with the rows and with the width
(the attention of a step reads the whole filled cache).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import torch

from rlxf.rollout.decoders import LlamaDecoder

sys.path.insert(0, str(Path(__file__).parent))
from common import alternate, emit, median  # noqa: E402
from decoder_speed import tiny_llama  # noqa: E402

VOCAB = 100


def prompts(rows: int, width: int) -> tuple[torch.Tensor, torch.Tensor]:
    ids = torch.randint(1, VOCAB, (rows, width), generator=torch.Generator().manual_seed(rows + width))
    return ids, torch.ones_like(ids)


def decode(decoder: LlamaDecoder, rows: int, width: int, steps: int) -> None:
    """A prefill of ``width`` tokens per row, then ``steps`` decode steps (0: the prefill alone)."""
    logits = decoder.prefill(*prompts(rows, width), max(steps, 1))
    for _ in range(steps):
        logits = decoder.step(logits.argmax(-1))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--rows", default="1,3,8,16,64")
    parser.add_argument("--widths", default="5,150")
    parser.add_argument("--steps", type=int, default=50)
    parser.add_argument("--reps", type=int, default=5)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    decoder = LlamaDecoder.from_hf(tiny_llama(VOCAB, "cpu", torch.float32))
    cases = [(r, w) for r in map(int, args.rows.split(",")) for w in map(int, args.widths.split(","))]
    runs = {}
    for rows, width in cases:  # the prefill alone is timed too and subtracted
        runs[f"{rows} rows, width {width}"] = lambda r=rows, w=width: decode(decoder, r, w, args.steps)
        runs[f"{rows} rows, width {width}, prefill"] = lambda r=rows, w=width: decode(decoder, r, w, 0)
    seconds = {name: median(times) for name, times in alternate(runs, reps=args.reps).items()}
    emit({
        "benchmark": "decode_step_cost", "threads": args.threads, "steps": args.steps,
        "ms_per_step": {f"{r} rows, width {w}": round(
            (seconds[f"{r} rows, width {w}"] - seconds[f"{r} rows, width {w}, prefill"]) / args.steps * 1e3, 2)
            for r, w in cases},
    })


if __name__ == "__main__":
    main()
