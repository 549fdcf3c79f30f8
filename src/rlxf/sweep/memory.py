"""How many seeds of a sweep fit in memory at once: a seed's peak resident memory, estimated before it runs,
against what the machine has available.

A seed's peak is, in one process (the embedded runtime): the interpreter with torch and transformers
(``BASE_MB``, measured on the tiny model), and per parameter of each model held: the policy's weights, its
gradients and AdamW's two moments for the weights that train (every weight, or LoRA's adapters), the rollout
engine's copy (the fast decoder keeps its own fused layout), a frozen reference (``kl_coef > 0``, full
fine-tuning: LoRA's reference is the adapter switched off), a critic trained as the policy is (weights,
gradients, two moments), a teacher; plus the logits of one micro-batch, ``micro_batch x tokens x vocab x
4 bytes x 3`` (the logits, their log-softmax and its gradient; ``train.logits_chunk_tokens`` bounds the
tokens). Tokens are ``data.max_prompt_tokens`` plus the generation budget, an upper bound. A seed that has
finished in this sweep's folder measured its own peak (``summary.json``'s ``peak_rss_mb``): that figure is
used instead. docs/algorithms.md compares the estimate with measured peaks.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from pathlib import Path

MB = 2**20
BASE_MB = 450.0  # python + torch + transformers + a tiny model's run (the tiny rows of the docs' table)
LOGIT_COPIES = 3  # logits, log-softmax, gradient
DTYPE_BYTES = {"float32": 4, "bfloat16": 2, "float16": 2}


@dataclass
class ModelShape:
    parameters: int
    vocab: int
    bytes_per_parameter: int
    lora_parameters: int = 0  # the adapters' parameters under the config's LoRA section (0 without one)


@dataclass
class SeedMemory:
    """A seed's peak in MiB and where the figure comes from."""

    mb: float
    source: str  # "estimated from ..." or "measured: ..."
    parts: dict[str, float] = field(default_factory=dict)


def model_shape(path: str, dtype: str = "auto", lora=None) -> ModelShape:
    """Parameter count, vocabulary and bytes per weight of the model at ``path`` (model.path), built on the
    meta device from its config.json: no weights are read."""
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM

    from rlxf.models.loading import resolve_model_path

    config = AutoConfig.from_pretrained(resolve_model_path(path), local_files_only=True)
    with torch.device("meta"):
        model = AutoModelForCausalLM.from_config(config)
    stored = str(getattr(config, "dtype", None) or "float32").removeprefix("torch.")
    size = DTYPE_BYTES.get(dtype if dtype != "auto" else stored, 4)
    return ModelShape(sum(p.numel() for p in model.parameters()), int(config.vocab_size), size,
                      _lora_parameters(model, lora) if lora is not None else 0)


def _lora_parameters(model, lora) -> int:
    """r x (in + out) for each linear layer LoRA adapts (peft's all-linear: every one but the LM head)."""
    import torch

    targets = lora.target_modules
    total = 0
    for name, module in model.named_modules():
        if not isinstance(module, torch.nn.Linear) or name.endswith("lm_head"):
            continue
        if targets == "all-linear" or name.rsplit(".", 1)[-1] in targets:
            total += lora.r * (module.in_features + module.out_features)
    return total


def estimate_seed_mb(config, shape: ModelShape, critic: ModelShape | None = None,
                     teacher: ModelShape | None = None) -> SeedMemory:
    """The estimate described in the module's docstring, for one seed of ``config`` (a resolved Config)."""
    from rlxf.loops.setup import generation_budget

    weights = shape.parameters * shape.bytes_per_parameter / MB
    trained = (shape.lora_parameters or shape.parameters) * shape.bytes_per_parameter / MB
    loop = config.loop
    rl = loop in ("rl", "rl_async", "online_dpo")
    parts = {"base": BASE_MB, "policy weights": weights, "gradients + AdamW moments": 3 * trained}
    if rl and (config.rollout.engine != "hf" or config.train.backend != "single"):
        parts["rollout engine's copy"] = weights
    if (rl and config.algorithm.uses_reference or loop == "dpo") and config.model.lora is None:
        parts["reference"] = weights
    if rl and config.algorithm.use_critic:
        critic = critic or shape
        parts["critic (weights, gradients, AdamW)"] = 4 * critic.parameters * critic.bytes_per_parameter / MB
    if teacher is not None:
        parts["teacher"] = teacher.parameters * teacher.bytes_per_parameter / MB
    tokens = config.data.max_prompt_tokens + (generation_budget(config) if rl or loop == "sft" else 0)
    micro = config.preference.micro_batch_size * 2 if loop in ("dpo", "reward_model") else config.train.micro_batch_size
    logit_tokens = min(micro * tokens, config.train.logits_chunk_tokens) if config.train.logits_chunk_tokens \
        else micro * tokens
    parts["logits of a micro-batch"] = logit_tokens * shape.vocab * 4 * LOGIT_COPIES / MB
    described = (f"estimated from {shape.parameters:,} parameters x {shape.bytes_per_parameter} bytes"
                 + (f" ({shape.lora_parameters:,} trained by LoRA)" if shape.lora_parameters else ""))
    return SeedMemory(round(sum(parts.values())), described, {k: round(v) for k, v in parts.items()})


def estimate_config_mb(config) -> SeedMemory:
    """``estimate_seed_mb`` with the shapes read from the config's model paths."""
    model = config.model
    shape = model_shape(model.path, model.dtype, model.lora)
    critic = model_shape(model.critic_path, model.dtype) if model.critic_path else None
    teacher = model_shape(model.teacher_path, model.dtype) if model.teacher_path else None
    return estimate_seed_mb(config, shape, critic, teacher)


def measured_peak(run_dirs: list[Path]) -> SeedMemory | None:
    """The highest ``peak_rss_mb`` of the finished seeds among ``run_dirs``, when one has it."""
    peaks = []
    for run_dir in run_dirs:
        try:
            summary = json.loads((run_dir / "summary.json").read_text())
        except (OSError, ValueError):
            continue
        if summary.get("peak_rss_mb") and not summary.get("stopped_by"):
            peaks.append((float(summary["peak_rss_mb"]), run_dir.name))
    if not peaks:
        return None
    peak, name = max(peaks)
    return SeedMemory(round(peak), f"measured: peak_rss_mb of {name}")


def available_mb() -> float:
    """Memory the machine can give new processes without swapping (Linux ``MemAvailable``; psutil elsewhere)."""
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemAvailable:"):
                return int(line.split()[1]) / 1024
    except OSError:
        pass
    import psutil

    return psutil.virtual_memory().available / MB


def margin_mb(available: float) -> float:
    """Kept free for everything else on the machine: a tenth of what is available, at least 512 MiB."""
    return max(512.0, available / 10)


def seeds_that_fit(seed_mb: float, available: float) -> int:
    return max(0, int((available - margin_mb(available)) // max(seed_mb, 1.0)))


def default_parallel() -> int:
    return os.cpu_count() or 1
