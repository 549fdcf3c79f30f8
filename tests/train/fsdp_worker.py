"""One FSDP2 rank of the data-parallel test (spawned by torch.multiprocessing)."""

from __future__ import annotations

import torch
import torch.distributed as dist

from tests.train.dp_helpers import OPTIM, train_steps, write_json


def fsdp_rank(rank: int, world: int, init_file: str, model_dir: str, steps: tuple[int, int], out: str,
              resume_from: str | None, save_to: str | None) -> None:
    from rlxf.models.loading import load_causal_lm
    from rlxf.train.fsdp_engine import FSDP2TrainEngine, global_counts, save_full_model

    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=f"file://{init_file}", rank=rank, world_size=world)
    try:
        torch.manual_seed(0)
        model = load_causal_lm(f"{resume_from}/policy" if resume_from else model_dir).requires_grad_(True)
        engine = FSDP2TrainEngine(model, OPTIM)
        if resume_from:
            engine.load_state(resume_from, "actor")
        losses = train_steps(engine, range(*steps), slice(rank, None, world), global_counts)
        if save_to:
            save_full_model(engine, f"{save_to}/policy")
            engine.save_state(save_to, "actor")
        if rank == 0:
            write_json(out, losses)
    finally:
        dist.destroy_process_group()
