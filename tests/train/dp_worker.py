"""One rank of the data-parallel tests (spawned by torch.multiprocessing): runs jobs on any train backend."""

from __future__ import annotations

import os
import sys

import torch
import torch.distributed as dist

from tests.train.dp_helpers import OPTIM, train_steps, write_json


def dp_rank(rank: int, world: int, init_file: str, model_dir: str, jobs: list[dict], out: str) -> None:
    from rlxf.models.loading import load_causal_lm
    from rlxf.train.backends import build_train_engine
    from rlxf.train.fsdp_engine import global_counts, save_full_model

    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=f"file://{init_file}", rank=rank, world_size=world)
    try:
        results = []
        for job in jobs:
            resume_from, save_to = job.get("resume_from"), job.get("save_to")
            torch.manual_seed(0)
            # load_full: the engine is built on the initial weights and gets the checkpoint's weights
            # through load_full_state_dict (as the critic role resumes), not at construction.
            load_full = job.get("load_full", False)
            model = load_causal_lm(f"{resume_from}/policy" if resume_from and not load_full else model_dir)
            engine = build_train_engine(job["backend"], model.requires_grad_(True), OPTIM, **job.get("options", {}))
            if resume_from and load_full:
                engine.load_full_state_dict(load_causal_lm(f"{resume_from}/policy").state_dict())
            if resume_from:
                engine.load_state(resume_from, "actor")
            results.append(train_steps(engine, range(*job["steps"]), slice(rank, None, world), global_counts))
            if save_to:
                save_full_model(engine, f"{save_to}/policy")
                engine.save_state(save_to, "actor")
        if rank == 0:
            write_json(out, results)
    finally:
        dist.destroy_process_group()
    # Done and written: skip the interpreter's teardown. With OMP_WAIT_POLICY=PASSIVE (rlxf's default) a
    # DeepSpeed rank's exit sometimes aborted in a C++ destructor ("terminate called without an active
    # exception", ~1 run in 4 here) after its work was complete; the parent needs only the exit status.
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)
