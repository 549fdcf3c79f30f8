"""One rank of the tensor-parallel tests (spawned by torch.multiprocessing): the ``tp`` engine and the
single-process engine side by side on the same small random Llama, the same data; writes the differences."""

from __future__ import annotations

import json
import os
import sys

import torch
import torch.distributed as dist

from tests.train.dp_helpers import MICRO, OPTIM, ROWS, dataset, local_counts, token_loss

VOCAB = 128  # dp_helpers' token ids are < 100


def small_llama(tied: bool, kv_heads: int = 2) -> torch.nn.Module:
    """hidden 64, 4 heads of 16, ``kv_heads`` KV heads (GQA), 2 layers, fp32; the same weights on every call."""
    import transformers

    torch.manual_seed(0)
    config = transformers.LlamaConfig(
        vocab_size=VOCAB, hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
        num_key_value_heads=kv_heads, tie_word_embeddings=tied, attn_implementation="sdpa",
    )
    return transformers.LlamaForCausalLM(config).float().requires_grad_(True)


def whole(tensor: torch.Tensor) -> torch.Tensor:
    return tensor.full_tensor() if hasattr(tensor, "full_tensor") else tensor


def gathered_weights(engine) -> dict[str, torch.Tensor]:
    """What the weight sync sends: its bucket plan over ``trainer_tensors``, gathered a bucket at a time."""
    from rlxf.runtime.transports.plan import plan_buckets
    from rlxf.runtime.transports.source import trainer_tensors, whole_bucket

    tensors = trainer_tensors(engine)
    out = {}
    for spec in plan_buckets(tensors, bucket_bytes=16 * 1024).buckets:  # ~8 buckets on this model
        out.update(whole_bucket(tensors, spec.names))
    return out


def max_diffs(mine: dict[str, torch.Tensor], ref: dict[str, torch.Tensor]) -> dict[str, float]:
    assert sorted(mine) == sorted(ref), (sorted(mine), sorted(ref))
    return {name: float((whole(mine[name]).detach() - ref[name].detach()).abs().max()) for name in ref}


def kernel(group: dict) -> str:
    return "fused" if group.get("fused") else "foreach" if group.get("foreach") else "per-tensor loop"


def one_step(engine, rows: slice, step: int) -> list[float]:
    ids, mask = dataset(step)
    num_tokens, num_seqs = local_counts(mask)  # the whole mini-batch's counts (every rank sees all rows)
    from rlxf.algos import LossNormaliser

    norm = LossNormaliser.from_counts(num_tokens, num_seqs, mask.shape[1])
    ids, mask = ids[rows], mask[rows]
    micros = [(ids[i: i + MICRO], mask[i: i + MICRO]) for i in range(0, len(ids), MICRO)]
    out = engine.optimizer_step(micros, lambda m: token_loss(engine.model, m[0], m[1], norm))
    return [out["loss"], out["grad_norm"]]


def resumed_single(checkpoint: str, step: int) -> list[float]:
    """The single-process engine resumed from a tp checkpoint: [loss, grad norm] of ``step``."""
    from rlxf.models.loading import load_causal_lm
    from rlxf.train.engine import TrainEngine

    engine = TrainEngine(load_causal_lm(f"{checkpoint}/policy").float().requires_grad_(True), OPTIM)
    engine.load_state(checkpoint, "actor")
    return one_step(engine, slice(0, ROWS), step)


def continued_single(tied: bool, steps: int) -> list[list[float]]:
    from rlxf.train.engine import TrainEngine

    engine = TrainEngine(small_llama(tied), OPTIM)
    return [one_step(engine, slice(0, ROWS), step) for step in range(steps)]


def tp_rank(rank: int, world: int, init_file: str, case: dict, out_dir: str) -> None:
    from rlxf.train.backends import build_train_engine
    from rlxf.train.engine import TrainEngine
    from rlxf.train.fsdp_engine import save_full_model

    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=f"file://{init_file}", rank=rank, world_size=world)
    try:
        ref = TrainEngine(small_llama(case["tied"]), OPTIM)
        engine = build_train_engine("tp", small_llama(case["tied"]), OPTIM, tensor_parallel=case["tp"])
        initial = {n: t.clone() for n, t in ref.model.state_dict().items()}
        synced, full = gathered_weights(engine), engine.full_state_dict()
        result = {
            "sync_bit_exact": all(torch.equal(synced[n], t) for n, t in initial.items()) and sorted(synced) == sorted(initial),
            # full_state_dict (for save_pretrained) offloads to rank 0's CPU only
            "full_bit_exact": rank > 0 or (all(torch.equal(full[n], t) for n, t in initial.items())
                                           and sorted(full) == sorted(initial)),
            "sharded": sorted(n for n, p in engine.model.named_parameters() if hasattr(p, "full_tensor")
                              and p.to_local().numel() < p.numel()),
            "tied": engine.model.get_output_embeddings().weight is engine.model.get_input_embeddings().weight,
            "dp_rank": engine.dp_rank, "steps": [], "ref_steps": [],
            "kernel": kernel(engine.optimizer.param_groups[0]),
        }
        rows = slice(engine.dp_rank, ROWS, engine.dp_size)
        for step in range(2):
            result["steps"].append(one_step(engine, rows, step))
            result["ref_steps"].append(one_step(ref, slice(0, ROWS), step))
            if step == 0:  # the clipped gradients the first update used, gathered
                grads = {n: p.grad for n, p in engine.model.named_parameters()}
                result["grad_diffs"] = max_diffs(grads, {n: p.grad for n, p in ref.model.named_parameters()})
                result["grad_max"] = max(float(p.grad.abs().max()) for p in ref.model.parameters())
                result["first_weight_diffs"] = max_diffs(gathered_weights(engine), ref.model.state_dict())
        result["weight_diffs"] = max_diffs(gathered_weights(engine), ref.model.state_dict())
        save_full_model(engine, f"{out_dir}/ckpt/policy")  # the single-process format: the tests resume it
        engine.save_state(f"{out_dir}/ckpt", "actor")
        result["checkpoint"] = f"{out_dir}/ckpt"
        # and back: a fresh tp engine takes the checkpoint (weights through load_full_state_dict, as the
        # critic role resumes) and trains step 3 as the uninterrupted single-process engine does
        from rlxf.models.loading import load_causal_lm

        resumed = build_train_engine("tp", small_llama(case["tied"]), OPTIM, tensor_parallel=case["tp"])
        resumed.load_full_state_dict(load_causal_lm(f"{out_dir}/ckpt/policy").float().state_dict())
        resumed.load_state(f"{out_dir}/ckpt", "actor")
        result["resumed_step"] = one_step(resumed, rows, 2)
        result["ref_step3"] = one_step(ref, slice(0, ROWS), 2)
        with open(f"{out_dir}/rank{rank}.json", "w") as f:
            json.dump(result, f)
    finally:
        dist.destroy_process_group()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)  # written: skip the interpreter's teardown (as dp_worker)


def spawn_case(tmp_path, case: dict, world: int) -> list[dict]:
    """Runs ``case`` on ``world`` gloo ranks; each rank's result."""
    import torch.multiprocessing as mp

    out = tmp_path / f"tp{case['tp']}_w{world}_{'tied' if case['tied'] else 'untied'}"
    out.mkdir()
    mp.spawn(tp_rank, args=(world, str(out / "init"), case, str(out)), nprocs=world, join=True)
    return [json.loads((out / f"rank{r}.json").read_text()) for r in range(world)]
