"""Building a run's pieces from its config: device, tokenizer, models, roles, data."""

from __future__ import annotations

import copy
import os
from dataclasses import dataclass

import torch
import transformers

from rlxf.config import Config, ConfigError, RewardConfig
from rlxf.data.prompt_lengths import check_prompt_lengths
from rlxf.data.prompts import load_task
from rlxf.data.tasks import TaskSplits
from rlxf.models.loading import load_causal_lm, load_tokenizer, resolve_model_path
from rlxf.models.special_tokens import stop_token_ids
from rlxf.models.training_switches import disable_dropout, enable_activation_checkpointing
from rlxf.rewards.registry import build_reward
from rlxf.roles.reward import RewardRole
from rlxf.roles.rollout import RolloutRole
from rlxf.rollout.engine import build_engine
from rlxf.rollout.sampling import SamplingParams
from rlxf.train.process_group import SINGLE_PROCESS_BACKENDS


def pick_device(name: str) -> str:
    if name == "auto":
        return "cuda" if torch.cuda.is_available() else "cpu"
    return name


def default_threads(cpus: int | None = None) -> int:
    """``threads: 0``: half the cores, at least one. Measured on 2 cores beside one busy process
    (benchmarks/threads_under_load.py): one thread per core made a step 7.9x slower than idle, one
    thread 2.0x; half the cores leaves a core to another job of the same size."""
    return max(1, (cpus if cpus is not None else os.cpu_count() or 1) // 2)


def configure_torch(config: Config) -> None:
    transformers.utils.logging.disable_progress_bar()
    transformers.utils.logging.set_verbosity_error()
    torch.set_num_threads(config.threads or default_threads())


@dataclass
class RunContext:
    """What every loop builds first from the config: where it runs, the model's path and tokenizer, the
    task's rows and the rewards."""

    device: str
    model_path: str
    tokenizer: transformers.PreTrainedTokenizerBase
    task: TaskSplits
    reward: RewardRole
    eval_reward: RewardRole  # scores held-out answers: ``eval.reward``, else the training reward


def build_reward_role(cfg: RewardConfig) -> RewardRole:
    try:
        reward = build_reward(cfg.function, cfg.kwargs)
    except ValueError as err:  # unknown name, module that does not import, attribute missing
        raise ConfigError(f"reward.function {cfg.function!r}: {err}") from None
    return RewardRole(reward, cfg.function, cfg.timeout_seconds)


def build_run_context(config: Config, cache_dir: str | None = None, runtime=None) -> RunContext:
    """``runtime`` (rlxf.runtime) places the training reward role; None keeps it in this process.
    ``cache_dir``: where ``tiny:NAME`` models are built (None: the user cache, models/cache_dir.py)."""
    configure_torch(config)
    model_path = resolve_model_path(config.model.path, cache_dir)
    tokenizer = load_tokenizer(model_path, config.model.allow_download)
    reward = runtime.place("reward", build_reward_role, config.reward) if runtime else build_reward_role(config.reward)
    return RunContext(
        device=pick_device(config.model.device),
        model_path=model_path,
        tokenizer=tokenizer,
        task=check_prompt_lengths(load_task(config.data, config.seed), tokenizer, config.data),
        reward=reward,
        eval_reward=build_reward_role(config.eval.reward) if config.eval.reward else reward,
    )


def load_policy(config: Config, path: str, device: str) -> torch.nn.Module:
    """A trainable model: the checkpoint's dtype unless ``model.dtype`` says otherwise, dropout off
    unless ``model.disable_dropout: false``, activations recomputed with ``model.gradient_checkpointing``
    (the critic, a copy of the policy or loaded here too, inherits it)."""
    model = load_causal_lm(path, config.model.dtype, device, config.model.allow_download)
    if config.model.gradient_checkpointing:
        enable_activation_checkpointing(model)
    return disable_dropout(model) if config.model.disable_dropout else model


def make_rollout_role(config: Config, policy: torch.nn.Module, tokenizer) -> RolloutRole:
    """In this process the engine decodes with the policy's own weights (no extra copy for the generic
    decoder; the fast decoder keeps its own fused layout); on Ray the actor gets its own copy. A
    data-parallel backend (fsdp2, deepspeed) reshapes the trainer's module in place (DTensor shards,
    ZeRO-3 partitions), so the engine then decodes with a copy of its own."""
    if config.train.backend not in SINGLE_PROCESS_BACKENDS:
        policy = frozen_copy(policy)
    engine = build_engine(  # stops at any of generation_config's EOS ids, the tokenizer's, the end of turn
        config.rollout.engine, policy, stop_token_ids(tokenizer, policy), tokenizer.pad_token_id,
        config.rollout.engine_options,
    )
    if config.env.name:  # multi-turn: an environment answers each policy turn (roles/env_rollout.py)
        from rlxf.envs.base import env_class
        from rlxf.rewards.registry import import_object
        from rlxf.roles.env_rollout import EnvRolloutRole

        own = getattr(env_class(config.env.name), "rollout_role", None)  # e.g. openai_agent: agents drive
        role_cls = import_object(own) if own else EnvRolloutRole
        return role_cls(engine, tokenizer, config.data.chat_template, config.data.max_prompt_tokens, config.env)
    return RolloutRole(engine, tokenizer, config.data.chat_template, config.data.max_prompt_tokens)


def build_rollout(config: Config, policy: torch.nn.Module, tokenizer, runtime=None) -> RolloutRole:
    """The rollout role, placed by ``runtime`` (rlxf.runtime) when given."""
    if runtime is None:
        return make_rollout_role(config, policy, tokenizer)
    return runtime.place("rollout", make_rollout_role, config, policy, tokenizer)


def frozen_copy(model: torch.nn.Module) -> torch.nn.Module:
    return copy.deepcopy(model).eval().requires_grad_(False)


def generation_budget(config: Config) -> int:
    """The most response tokens a trajectory can have: the environment's budget for multi-turn rollouts,
    else ``rollout.max_new_tokens`` (Dr. GRPO's constant length, ``seq_mean_token_sum_norm``)."""
    return config.env.max_total_tokens if config.env.name else config.rollout.max_new_tokens


def sampling_params(config: Config) -> SamplingParams:
    r = config.rollout
    return SamplingParams(
        n=r.n_samples, temperature=r.temperature, top_p=r.top_p, top_k=r.top_k, max_new_tokens=r.max_new_tokens
    )
