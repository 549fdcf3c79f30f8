"""Shared by the data-parallel tests: a fixed token dataset, a token-mean loss, a training run, the
single-process reference (`single`) and a group of spawned gloo ranks running jobs (`spawn_jobs`)."""

from __future__ import annotations

import json
import uuid
from pathlib import Path

import torch
import torch.nn.functional as F

from rlxf.algos import LossNormaliser
from rlxf.config import OptimConfig

ROWS, WIDTH, MICRO = 8, 12, 2
OPTIM = OptimConfig(lr=1e-2, grad_clip=1.0)


def dataset(step: int) -> tuple[torch.Tensor, torch.Tensor]:
    """(ids [ROWS, WIDTH], mask [ROWS, WIDTH-1]) for ``step``; rows have different lengths."""
    gen = torch.Generator().manual_seed(step)
    ids = torch.randint(4, 100, (ROWS, WIDTH), generator=gen)
    lengths = torch.randint(2, WIDTH, (ROWS,), generator=gen)
    mask = (torch.arange(WIDTH - 1)[None, :] < lengths[:, None]).float()
    return ids, mask


def token_loss(model, ids, mask, normaliser: LossNormaliser):
    logits = model(input_ids=ids).logits[:, :-1].float()
    per_token = F.cross_entropy(logits.reshape(-1, logits.shape[-1]), ids[:, 1:].reshape(-1), reduction="none")
    return (per_token.view_as(mask) * mask).sum() / normaliser.num_tokens, {}


def train_steps(engine, steps: range, rows: slice, counts) -> list[list[float]]:
    """Optimizer steps on ``rows`` of each step's data, micro-batches of MICRO rows: [loss, grad norm]
    of each step (the norm before clipping, so a gradient of the wrong size shows)."""
    losses = []
    for step in steps:
        ids, mask = dataset(step)
        ids, mask = ids[rows], mask[rows]
        num_tokens, num_seqs = counts(mask)
        norm = LossNormaliser.from_counts(num_tokens, num_seqs, mask.shape[1])
        micros = [(ids[i: i + MICRO], mask[i: i + MICRO]) for i in range(0, len(ids), MICRO)]
        out = engine.optimizer_step(micros, lambda m, n=norm: token_loss(engine.model, m[0], m[1], n))
        losses.append([out["loss"], out["grad_norm"]])
    return losses


def losses(run: list[list[float]]) -> list[float]:
    return [loss for loss, _ in run]


def grad_norms(run: list[list[float]]) -> list[float]:
    return [norm for _, norm in run]


def local_counts(mask):
    per_row = mask.sum(dim=1)
    return float(per_row.sum()), float((per_row > 0).sum())


def write_json(path: Path, value) -> None:
    Path(path).write_text(json.dumps(value))


def single(model_dir, steps, resume_from=None, save_to=None) -> list[list[float]]:
    """The single-process engine on all ROWS (the reference); optionally resumes from / saves a checkpoint."""
    from rlxf.models.loading import load_causal_lm
    from rlxf.train.engine import TrainEngine

    torch.manual_seed(0)
    model = load_causal_lm(f"{resume_from}/policy" if resume_from else model_dir).requires_grad_(True)
    engine = TrainEngine(model, OPTIM)
    if resume_from:
        engine.load_state(resume_from, "actor")
    losses = train_steps(engine, range(*steps), slice(0, ROWS), local_counts)
    if save_to:
        model.save_pretrained(f"{save_to}/policy")
        engine.save_state(save_to, "actor")
    return losses


def spawn_jobs(tmp_path, model_dir, jobs: list[dict], world: int = 2) -> list[list[list[float]]]:
    """Runs ``jobs`` one after the other in one group of ``world`` gloo ranks; each job's [loss, grad norm]s.

    A job: ``backend`` (a train_engine name), ``options`` (engine keywords), ``steps`` (start, stop),
    ``resume_from``/``save_to`` (checkpoint directories or None), ``load_full`` (resume the weights
    through ``engine.load_full_state_dict`` instead of building the engine on them)."""
    import torch.multiprocessing as mp

    from tests.train.dp_worker import dp_rank

    tag = f"spawn_{uuid.uuid4().hex[:8]}"  # a fresh rendezvous file for every group
    out = tmp_path / f"{tag}.json"
    mp.spawn(dp_rank, args=(world, str(tmp_path / f"{tag}.init"), model_dir, jobs, str(out)), nprocs=world, join=True)
    return json.loads(out.read_text())
