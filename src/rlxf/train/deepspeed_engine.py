"""Data-parallel training with DeepSpeed ZeRO stage 2 or 3: the ``TrainEngine`` interface on N ranks.

ZeRO-2 partitions gradients and AdamW state over the ranks; ZeRO-3 also partitions the parameters
(gathered layer by layer in forward/backward by DeepSpeed's module hooks, so ``engine.model`` is
called as usual). ``torch.distributed`` must be initialised before the engine is built (gloo on CPU,
NCCL on GPU); DeepSpeed wraps the existing default process group.

Semantics are those of the single-process engine, as in ``fsdp_engine``: ``loss_of`` returns the
micro-batch's share of the *global* mini-batch loss (``global_counts``), DeepSpeed averages gradients
over ranks, so each loss is multiplied by the world size before ``backward``. Gradients accumulate
over the micro-batches of one ``optimizer_step`` (DeepSpeed's ``managed_gradient_accumulation:
false``: the caller owns the boundary, any number of micro-batches), then DeepSpeed clips to
``cfg.grad_clip`` (same coefficient as ``clip_grad_norm_``) and steps. The optimizer is the same
torch AdamW (a client optimizer: no DeepSpeed C++ op is built) under the same warmup schedule.
Precision: fp32 weights and ZeRO state; ``cfg.autocast`` wraps each mini-batch's forwards as in the other engines.

Checkpoints are the single-process format: ``save_state`` gathers every parameter's AdamW slots from
the ZeRO partitions (``safe_get_full_optimizer_state``) and rank 0 writes
``<name>.optimizer.safetensors`` + ``.json`` with the same parameter indices; ``load_state`` scatters
them back (nothing is gathered or written for the slots before the first step: AdamW has no state
yet). ``full_state_dict`` gives the whole model (gathered under ZeRO-3, tied weights shared) and
``save_full_model`` (shared with FSDP2) writes it with ``save_pretrained``; ``load_full_state_dict``
loads a whole model into the (partitioned) parameters and ZeRO's fp32 master copies.
Checkpoints cross between this engine, the single-process engine and FSDP2.

Select it with ``build_train_engine("deepspeed", model, cfg)`` (ZeRO-2) or
``build_train_engine("deepspeed", model, cfg, zero_stage=3)``; in a recipe ``train.backend: deepspeed``
and ``train.zero_stage: 3`` (``TrainConfig.engine_options``).
"""

from __future__ import annotations

import contextlib
import math
import os

import torch
import torch.distributed as dist

from rlxf.train import checkpoint as ckpt
from rlxf.train.backends import TRAIN_ENGINES
from rlxf.train.engine import NonFiniteUpdateError, TrainEngine
from rlxf.train.fsdp_engine import global_counts, save_full_model, share_tied_weights  # noqa: F401  (shared)
from rlxf.train.optim_config import OptimConfig

ADAM_SLOTS = ("exp_avg", "exp_avg_sq")


def _import_deepspeed():
    """``import deepspeed`` set up for an already initialised process group, with no C++ op to build."""
    cpu = not torch.cuda.is_available()
    if cpu:  # without a GPU DeepSpeed probes other accelerators and warns: name the CPU accelerator
        os.environ.setdefault("DS_ACCELERATOR", "cpu")
    # DeepSpeed asserts LOCAL_RANK (set by its launcher and torchrun); a process group started another
    # way (torch.multiprocessing, Ray) gets the device it already uses.
    os.environ.setdefault("LOCAL_RANK", str(torch.cuda.current_device() if not cpu else dist.get_rank()))
    import deepspeed
    import deepspeed.ops

    if cpu:
        # The CPU accelerator communicates over gloo (oneCCL only if Intel's bindings are installed),
        # but its comm backend also JIT-compiles a shared-memory all-reduce that only DeepSpeed's
        # inference uses: a C++ compiler and about a minute on first use. Mark it unavailable.
        deepspeed.ops.__compatible_ops__["deepspeed_shm_comm"] = False
    return deepspeed


def deepspeed_config(cfg: OptimConfig, zero_stage: int) -> dict:
    """The DeepSpeed config for ``cfg``: one optimizer step per ``optimizer_step`` call, fp32."""
    zero: dict = {"stage": zero_stage, "overlap_comm": False, "contiguous_gradients": True}
    return {
        "train_micro_batch_size_per_gpu": 1,  # (unused: the caller builds the micro-batches)
        "gradient_accumulation_steps": 1,
        "managed_gradient_accumulation": False,  # backward accumulates; step() is the boundary
        "gradient_clipping": float(cfg.grad_clip or 0.0),  # 0 = no clipping (the norm is still reported)
        "zero_optimization": zero,
        "zero_allow_untested_optimizer": True,  # torch AdamW as client optimizer
        "fp16": {"enabled": False},
        "bf16": {"enabled": False},
        "steps_per_print": 2**31 - 1,
        "wall_clock_breakdown": False,
    }


@TRAIN_ENGINES.register("deepspeed")
class DeepSpeedTrainEngine(TrainEngine):
    def __init__(self, model: torch.nn.Module, cfg: OptimConfig, zero_stage: int = 2) -> None:
        if zero_stage not in (2, 3):
            raise ValueError(f"DeepSpeedTrainEngine supports ZeRO stage 2 or 3, not {zero_stage}")
        if not dist.is_initialized():
            raise RuntimeError("DeepSpeedTrainEngine needs torch.distributed initialised (init_process_group)")
        deepspeed = _import_deepspeed()
        self.zero_stage = zero_stage
        self.world_size = dist.get_world_size()
        self.grad_scale = float(self.world_size)
        self.params = [p for p in model.parameters() if p.requires_grad]  # checkpoint index order
        super().__init__(model, cfg)  # torch AdamW + warmup LambdaLR over self.params
        self.ds, self.zero_optimizer, _, _ = deepspeed.initialize(
            model=model, optimizer=self.optimizer, config=deepspeed_config(cfg, zero_stage),
            dist_init_required=False,
        )
        # self.optimizer stays the torch AdamW: ZeRO rewrote its param groups to the flat fp32
        # partitions, so the LambdaLR built on it still sets the learning rate DeepSpeed uses.

    # -- the update: DeepSpeed reduces, partitions, clips and steps ------------------------------------
    def _zero_grad(self) -> None:
        pass  # DeepSpeed clears its gradient partitions after every step

    def _backward(self, loss: torch.Tensor) -> None:
        from deepspeed.runtime.utils import register_output_backward_hooks

        # The loss functions call the plain module (roles hold it), not DeepSpeedEngine.forward, so
        # do the bookkeeping that forward does: count the micro-step (ZeRO-3 otherwise overwrites the
        # previous micro-batches' gradients instead of accumulating them) and hook the backward
        # prologue, which has to run inside autograd.
        self.zero_optimizer.clear_backward_seen_flag()
        register_output_backward_hooks(loss, preprocess_once_fn=self.ds._backward_prologue,
                                       preprocess_per_tensor_fn=self.ds._backward_prologue_per_tensor)
        self.ds.backward(loss)

    def _update(self) -> float:
        self.ds.step()
        norm = self.ds.get_global_grad_norm()
        norm = float(norm) if norm is not None else float("nan")
        if not math.isfinite(norm):  # DeepSpeed has stepped already: these weights must never be saved
            raise NonFiniteUpdateError(
                f"DeepSpeed stepped with a non-finite gradient norm ({norm}); stopping before anything is saved: "
                "resume from the last checkpoint"
            )
        return norm

    def _discard_gradients(self) -> None:
        self.ds.zero_grad()  # a skipped step (non-finite loss): its accumulated partitions go

    def _global_loss(self, local_loss: float) -> float:
        summed = torch.tensor([local_loss], dtype=torch.float64)
        dist.all_reduce(summed)  # the global mini-batch loss is the sum of the ranks' shares
        return float(summed)

    # -- whole model --------------------------------------------------------------------------------
    def full_state_dict(self) -> dict[str, torch.Tensor]:
        """The whole model on CPU (every rank must call it; for ``save_pretrained`` / weight sync)."""
        with self._gathered(modifier_rank=None):
            full = {k: v.detach().to("cpu", copy=True) for k, v in self.model.state_dict().items()}
        return share_tied_weights(self.model, full)

    def load_full_state_dict(self, state: dict[str, torch.Tensor]) -> None:
        """Every rank passes the whole model's weights (every rank must call it).

        The model's parameters are loaded (ZeRO-3: gathered, loaded on rank 0, re-partitioned from it),
        then ZeRO's fp32 master partitions, which the optimizer steps, are refreshed from them."""
        with self._gathered(modifier_rank=0):
            if self.zero_stage != 3 or dist.get_rank() == 0:
                self.model.load_state_dict(state)
        self.zero_optimizer.refresh_fp32_params()

    def _gathered(self, modifier_rank: int | None):
        """Whole parameters inside the block (ZeRO-3 gathers them; ``modifier_rank``'s edits are kept)."""
        if self.zero_stage != 3:
            return contextlib.nullcontext()
        from deepspeed.runtime.zero import GatheredParameters

        return GatheredParameters(list(self.model.parameters()), modifier_rank=modifier_rank)

    # -- optimizer checkpoints in the single-process format -----------------------------------------
    def _flat_partitions(self) -> list[torch.Tensor]:
        """This rank's flat fp32 partitions: the tensors the torch AdamW keeps state for."""
        zero = self.zero_optimizer
        return list(zero.fp32_partitioned_groups_flat if self.zero_stage == 3 else zero.single_partition_of_fp32_groups)

    def save_state(self, out_dir, name: str) -> None:
        from deepspeed.utils import safe_get_full_optimizer_state

        steps = [float(self.optimizer.state[flat]["step"]) for flat in self._flat_partitions()
                 if "step" in self.optimizer.state.get(flat, {})]
        state: dict[int, dict] = {}
        # Before the first step AdamW has no state: save none (as the single-process engine does) and
        # touch nothing, so that saving the step-0 checkpoint cannot change the first update.
        if steps:
            step = torch.tensor(max(steps), dtype=torch.float32)
            for index, param in enumerate(self.params):
                slots = {key: safe_get_full_optimizer_state(param, key) for key in ADAM_SLOTS}  # collective
                state[index] = {"step": step.clone(),
                                **{k: v.detach().to("cpu", torch.float32).reshape(param_shape(param))
                                   for k, v in slots.items()}}
        if dist.get_rank() == 0:
            groups = [{k: v for k, v in g.items() if k != "params"} for g in self.optimizer.param_groups]
            groups[0]["params"] = list(range(len(self.params)))
            ckpt.save_optimizer_state({"state": state, "param_groups": groups[:1]}, self.scheduler, out_dir, name)
        dist.barrier()

    def load_state(self, in_dir, name: str) -> None:
        from deepspeed.utils import safe_set_full_optimizer_state

        indexed, scheduler_state = ckpt.read_optimizer_state(in_dir, name, self.optimizer)
        if len(indexed["param_groups"]) != 1 or len(indexed["param_groups"][0]["params"]) != len(self.params):
            raise ValueError(f"{in_dir}/{name}: optimizer checkpoint does not match this model's parameters")
        saved_group = indexed["param_groups"][0]
        for group in self.optimizer.param_groups:  # lr, betas, weight decay, initial_lr as saved
            group.update({k: tuple(v) if k == "betas" else v for k, v in saved_group.items() if k != "params"})
        if indexed["state"]:  # (DeepSpeed's ZeRO state is private API: tested with DeepSpeed 0.19.8)
            step = next(iter(indexed["state"].values()))["step"]
            for flat in self._flat_partitions():
                self.optimizer.state[flat] = {
                    "step": torch.as_tensor(step, dtype=torch.float32).clone(),
                    **{key: torch.zeros_like(flat) for key in ADAM_SLOTS},
                }
            if self.zero_stage == 2:  # point each parameter's fragment view at the new state tensors
                self.zero_optimizer._hp_optimizer_states_linked = False
                self.zero_optimizer._lazy_init_hp_params_optimizer_state()
            device = self._flat_partitions()[0].device
            for index, param in enumerate(self.params):
                for key in ADAM_SLOTS:
                    value = indexed["state"][index][key].to(device, torch.float32)
                    if self.zero_stage == 3:
                        self._set_zero3_slot(param, value, key)
                    else:
                        safe_set_full_optimizer_state(param, value, key)
        self.scheduler.load_state_dict(scheduler_state)


    def _set_zero3_slot(self, param, value: torch.Tensor, key: str) -> None:
        """This rank's part of ``value`` into the AdamW slot ``key`` of a ZeRO-3 parameter.

        (``safe_set_full_optimizer_state`` cuts the unpadded value, so a parameter whose size the world
        size does not divide, e.g. a value head's one-element bias, overruns on the last rank.)"""
        part, _ = self.zero_optimizer._get_fp32_opt_state_partition(param, False, optim_state_key=key)
        rank = self.zero_optimizer._get_param_partition_rank(param)
        flat = value.flatten()
        flat = torch.nn.functional.pad(flat, (0, part.numel() * self.world_size - flat.numel()))
        part.data.copy_(flat.narrow(0, part.numel() * rank, part.numel()))


def param_shape(param: torch.Tensor) -> torch.Size:
    """The full shape of a (possibly ZeRO-3 partitioned) parameter."""
    return getattr(param, "ds_shape", param.shape)
