"""Data-parallel training with torch FSDP2 (``fully_shard``): the ``TrainEngine`` interface on N ranks.

Each rank holds a shard of the parameters, gradients and AdamW state (gloo on CPU, NCCL on GPU). The
caller's ``loss_of`` returns the micro-batch's share of the *global* mini-batch loss: build the
``LossNormaliser`` from counts summed over ranks (``global_counts``). FSDP averages gradients over
ranks, so the engine multiplies each loss by the world size before ``backward`` — the update equals
the single-process update on the union of the ranks' data.

Checkpoints are the single-process format: ``save_state`` gathers the full optimizer state and rank 0
writes ``<name>.optimizer.safetensors`` + ``.json`` with the same parameter indices;
``full_state_dict`` gives the whole model for ``save_pretrained``. A checkpoint from either engine
resumes in the other.
"""

from __future__ import annotations

import torch
import torch.distributed as dist
from torch.distributed.checkpoint.state_dict import (
    StateDictOptions,
    get_model_state_dict,
    get_optimizer_state_dict,
    set_model_state_dict,
    set_optimizer_state_dict,
)

from rlxf.models.saving import save_model
from rlxf.train import checkpoint as ckpt
from rlxf.train.backends import TRAIN_ENGINES
from rlxf.train.data_parallel import all_reduce_values, global_counts  # noqa: F401  (global_counts: re-exported)
from rlxf.train.engine import TrainEngine
from rlxf.train.optim_config import OptimConfig

FULL = StateDictOptions(full_state_dict=True, cpu_offload=True)


def transformer_blocks(model: torch.nn.Module) -> list[torch.nn.Module]:
    """The repeated decoder layers (each becomes one FSDP unit); empty for unknown layouts."""
    inner = getattr(model, "model", None) or getattr(model, "lm", None) or getattr(model, "trunk", None)
    inner = getattr(inner, "model", inner)
    layers = getattr(inner, "layers", None)
    return list(layers) if layers is not None else []


@TRAIN_ENGINES.register("fsdp2")
class FSDP2TrainEngine(TrainEngine):
    def __init__(self, model: torch.nn.Module, cfg: OptimConfig) -> None:
        if not dist.is_initialized():
            raise RuntimeError(f"{type(self).__name__} needs torch.distributed initialised (init_process_group)")
        self.world_size = dist.get_world_size()
        self.grad_scale = float(self.shard(model))
        self.param_names = [n for n, p in model.named_parameters() if p.requires_grad]
        super().__init__(model, cfg)

    def shard(self, model: torch.nn.Module) -> int:
        """Shards ``model`` in place (each decoder layer one FSDP unit); returns the number of replicas
        FSDP averages the gradients over (the engine scales the loss by it)."""
        from torch.distributed.fsdp import fully_shard

        for block in transformer_blocks(model):
            fully_shard(block)
        fully_shard(model)
        return self.world_size

    def _global_loss(self, local_loss: float) -> float:
        return all_reduce_values([local_loss])[0]  # the global mini-batch loss is the sum of the ranks' shares

    def _clip_gradients(self) -> float:
        params = [p for p in self.model.parameters() if p.grad is not None]
        limit = self.cfg.grad_clip if self.cfg.grad_clip else float("inf")
        norm = torch.nn.utils.clip_grad_norm_(params, limit)
        return float(norm.full_tensor() if hasattr(norm, "full_tensor") else norm)

    def full_state_dict(self) -> dict[str, torch.Tensor]:
        """The whole model on CPU (every rank must call it; for ``save_pretrained`` / weight sync)."""
        return share_tied_weights(self.model, get_model_state_dict(self.model, options=FULL))

    def load_full_state_dict(self, state: dict[str, torch.Tensor]) -> None:
        """Every rank passes the whole model's weights; each keeps its shard."""
        set_model_state_dict(self.model, state, options=StateDictOptions(full_state_dict=True))

    def save_state(self, out_dir, name: str) -> None:
        if not self.optimizer.state:
            # Before the first step: get_optimizer_state_dict would initialise the state with a zero-lr
            # step, and AdamW's step count 1 then shrinks the real first update (bias correction).
            if dist.get_rank() == 0:
                ckpt.save_optimizer(self.optimizer, self.scheduler, out_dir, name)
            dist.barrier()
            return
        full = get_optimizer_state_dict(self.model, self.optimizer, options=FULL)
        if dist.get_rank() == 0:
            index = {fqn: i for i, fqn in enumerate(self.param_names)}
            state = {index[fqn]: slots for fqn, slots in full["state"].items()}
            groups = [{**g, "params": [index[p] for p in g["params"]]} for g in full["param_groups"]]
            ckpt.save_optimizer_state({"state": state, "param_groups": groups}, self.scheduler, out_dir, name)
        dist.barrier()

    def load_state(self, in_dir, name: str) -> None:
        indexed, scheduler_state = ckpt.read_optimizer_state(in_dir, name, self.optimizer)
        self.scheduler.load_state_dict(scheduler_state)
        if not indexed["state"]:  # saved before the first step: nothing to load (and see save_state)
            return
        fqn = dict(enumerate(self.param_names))
        full = {
            "state": {fqn[i]: slots for i, slots in indexed["state"].items()},
            "param_groups": [{**g, "params": [fqn[i] for i in g["params"]]} for g in indexed["param_groups"]],
        }
        set_optimizer_state_dict(self.model, self.optimizer, optim_state_dict=full, options=FULL)


def share_tied_weights(model: torch.nn.Module, full: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """``full`` with tied weights (embeddings / LM head) shared again, as in ``model.state_dict()``.

    A gathered state dict holds separate copies of them; sharing one tensor lets ``save_pretrained``
    drop the duplicate like the single-process engine."""
    first: dict[int, str] = {}
    for name, param in model.named_parameters(remove_duplicate=False):
        owner = first.setdefault(id(param), name)
        if owner != name and owner in full:
            full[name] = full[owner]
    return full


def save_full_model(engine: FSDP2TrainEngine, out_dir) -> None:
    """``save_pretrained`` of the gathered model on rank 0 (loads with AutoModelForCausalLM)."""
    full = engine.full_state_dict()
    if dist.get_rank() == 0:
        import transformers

        plain = transformers.AutoModelForCausalLM.from_config(engine.model.config)
        plain.load_state_dict(full)
        save_model(plain, out_dir)
    dist.barrier()
