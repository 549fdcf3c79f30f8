"""Actor role: the policy being trained — log-probs, the policy-gradient update, its weights."""

from __future__ import annotations

from pathlib import Path

import torch

from rlxf.algos import AlgorithmConfig, LossNormaliser, policy_loss
from rlxf.batch import TrajectoryBatch
from rlxf.models.lora import is_lora, merged_state_dict, save_lora_checkpoint
from rlxf.models.saving import save_model
from rlxf.runtime.sync_modes import SyncRequest, select_weights
from rlxf.runtime.transports import endpoint
from rlxf.runtime.weight_sync import WeightBuckets, pack_weights
from rlxf.train.data_parallel import DataShard, is_writer
from rlxf.train.exact_log_probs import exact_batch_log_probs
from rlxf.train.log_probs import batch_log_probs, response_token_log_probs
from rlxf.train.optim_config import OptimConfig
from rlxf.train.ppo_batches import ppo_update
from rlxf.train.process_group import build_rank_engine


class ActorRole:
    def __init__(
        self, model: torch.nn.Module, optim: OptimConfig, algo: AlgorithmConfig,
        mini_batch_size: int, micro_batch_size: int, temperature: float, backend: str = "single",
        engine_options: dict | None = None, micro_batch_tokens: int | None = None,
        max_response_len: int | None = None, logits_chunk_tokens: int = 0, exact_log_probs: bool = False,
    ) -> None:
        self.model = model
        # train.backend (train/backends.py) with its options (TrainConfig.engine_options, e.g. zero_stage)
        self.engine = build_rank_engine(backend, model, optim, **(engine_options or {}))
        self.shard = DataShard.current()  # this rank's rows of every mini-batch (one rank: all)
        self.algo = algo
        self.mini_batch_size = mini_batch_size
        self.micro_batch_size = micro_batch_size
        self.micro_batch_tokens = micro_batch_tokens  # update micro-batches by padded tokens (train/micro_batches.py)
        self.max_response_len = max_response_len  # the generation budget: Dr. GRPO's constant (ppo_update)
        self.temperature = temperature or 1.0
        self.logits_chunk_tokens = logits_chunk_tokens  # LM head a chunk of tokens at a time (train/chunked_head.py)
        # rollout.engine_options.batch_invariant: old log-probs from the engine's own forward (train/exact_log_probs.py)
        self.exact_log_probs = exact_log_probs

    def compute_log_probs(self, batch: TrajectoryBatch) -> torch.Tensor:
        if self.exact_log_probs:  # the weights the engine decodes with, by the same names
            return exact_batch_log_probs(self.model.config, self.state_dict(), batch, self.micro_batch_size,
                                         self.temperature)
        return batch_log_probs(self.model, batch, self.micro_batch_size, self.temperature, self.logits_chunk_tokens)

    def state_dict(self) -> dict[str, torch.Tensor]:
        """The weights rollout engines decode with (with LoRA: merged, under the base model's names)."""
        return merged_state_dict(self.model) if is_lora(self.model) else self.engine.full_state_dict()

    def export_weights(self, version: int, bucket_bytes: int, request: SyncRequest | None = None,
                       checksum: bool = False) -> WeightBuckets:
        """The policy's weights in a few flat buckets, tagged ``version`` (runtime/weight_sync.py); with a
        ``request`` only what it needs (runtime/sync_modes.py: a delta, a LoRA adapter)."""
        selection = select_weights(self.state_dict(), self.model, version, request, checksum)
        return pack_weights(selection.tensors, version, bucket_bytes, selection.header)

    def send_weights(self, version: int, channel, request: SyncRequest | None = None):
        """Send the weights over ``channel``'s transport (runtime/transports/); every trainer rank calls it."""
        return endpoint(channel, "Sender").send(self.engine, version, request)

    def save_checkpoint(self, out_dir: Path) -> None:
        """``policy/`` (loads with AutoModelForCausalLM; with LoRA merged, plus ``policy_adapter/``) and
        ``actor.optimizer.*`` into ``out_dir``."""
        if is_lora(self.model):
            save_lora_checkpoint(self.model, out_dir)
        else:
            weights = self.engine.full_state_dict()  # every rank takes part in the gather
            if is_writer():
                save_model(self.model, Path(out_dir) / "policy", weights)
        self.engine.save_state(Path(out_dir), "actor")

    def load_checkpoint(self, in_dir: Path) -> None:
        """The optimizer state (the weights were loaded with the policy)."""
        self.engine.load_state(Path(in_dir), "actor")

    def update(self, batch: TrajectoryBatch, generator: torch.Generator) -> list[dict[str, float]]:
        """PPO epochs over mini-batches; one metrics dict per optimizer step."""
        return ppo_update(
            self.engine, batch, self.mini_batch_size, self.micro_batch_size, self.algo.ppo_epochs, generator, self._loss,
            self.shard, self.micro_batch_tokens, self.max_response_len,
        )

    def _loss(self, micro: TrajectoryBatch, normaliser: LossNormaliser) -> tuple[torch.Tensor, dict[str, float]]:
        mask = micro.loss_mask.float()
        wants_entropy_grad = self.algo.entropy_coef > 0
        log_probs, entropy = response_token_log_probs(
            self.model, micro.input_ids, micro.attention_mask, micro.response_ids, mask, self.temperature,
            with_entropy=True, entropy_grad=wants_entropy_grad, chunk_tokens=self.logits_chunk_tokens,
        )
        old = micro.old_log_probs if micro.old_log_probs is not None else log_probs.detach()
        kl_in_loss = micro.ref_log_probs is not None and not self.algo.kl_in_reward
        loss, metrics = policy_loss(
            self.algo, log_probs, old, micro.advantages, micro.loss_mask, normaliser,
            rollout_log_probs=micro.rollout_log_probs,
            ref_log_probs=micro.ref_log_probs if kl_in_loss else None,
            entropy=entropy if wants_entropy_grad else None,
        )
        metrics["entropy"] = float((entropy.detach() * mask).sum() / mask.sum().clamp(min=1))
        return loss, metrics
