"""The typed config tree, loaded from a YAML recipe plus dotted ``key=value`` overrides.

Every section forbids unknown keys, so a typo fails at start-up with the dotted path of the key.
Batch sizes are counted in *trajectories* (one prompt + one response) unless the name says prompts:

* ``train.prompts_per_step``  prompts drawn per RL step; each gets ``rollout.n_samples`` responses,
  so a step holds ``prompts_per_step * n_samples`` trajectories (the rollout batch);
* ``train.mini_batch_size``   trajectories per optimizer step (the rollout batch is split into
  ``rollout batch / mini_batch_size`` optimizer steps per PPO epoch);
* ``train.micro_batch_size``  trajectories per forward/backward pass (gradient accumulation inside a
  mini-batch; it changes memory use and speed, never the result — see docs/algorithms.md).
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from rlxf.algos.config import AlgorithmConfig
from rlxf.algos.preference_losses import PreferenceLossConfig
from rlxf.config_error import ConfigError
from rlxf.models.lora_config import LoraConfig
from rlxf.runtime.config import RuntimeConfig
from rlxf.tracking.config import LoggingConfig
from rlxf.train.optim_config import OptimConfig

DEFAULT_RECIPE = Path(__file__).parent / "recipes" / "default.yaml"


class Section(BaseModel):
    model_config = ConfigDict(extra="forbid", validate_assignment=True)


class ModelConfig(Section):
    path: str = "tiny:default"  # a local folder / HF cache name, or tiny:NAME for the built-in tiny model
    dtype: Literal["auto", "float32", "bfloat16", "float16"] = "auto"  # auto = the checkpoint's own dtype
    allow_download: bool = False  # offline by default: only a local folder or the HF cache is read
    disable_dropout: bool = True  # dropout off for training (as TRL does): rollout and trainer agree
    gradient_checkpointing: bool = False  # recompute activations in backward (actor and critic): less memory
    lora: LoraConfig | None = None  # train low-rank adapters instead of every weight (pip install 'rlxf[lora]')
    device: str = "auto"  # auto = cuda when available, else cpu
    critic_path: str | None = None  # PPO critic initialisation; defaults to the policy's path


class DataConfig(Section):
    task: str = "arithmetic"  # a registered task name, or "file"
    path: str | None = None  # JSONL / Parquet with `prompt` or `messages` (task: file)
    eval_path: str | None = None
    eval_size: int = Field(200, ge=1)
    chat_template: bool = False  # render `prompt` strings through the tokenizer's chat template
    max_prompt_tokens: int = Field(256, ge=1)
    long_prompts: Literal["error", "drop"] = "error"  # prompts over max_prompt_tokens, found at load
    task_args: dict[str, Any] = Field(default_factory=dict)


class RolloutConfig(Section):
    engine: str = "torch"  # torch (built-in) | hf (transformers generate, the reference) | vllm (optional)
    engine_options: dict[str, Any] = Field(default_factory=dict)  # keyword arguments of the engine (vllm: vllm.LLM's)
    n_samples: int = Field(8, ge=1)
    temperature: float = Field(1.0, ge=0.0)
    top_p: float = Field(1.0, gt=0.0, le=1.0)
    top_k: int = Field(0, ge=0)  # 0 = off
    max_new_tokens: int = Field(16, ge=1)


class RewardConfig(Section):
    function: str = "arithmetic"  # a registered reward name, or a dotted path module:attr
    kwargs: dict[str, Any] = Field(default_factory=dict)
    timeout_seconds: float | None = Field(300.0, gt=0)  # a reward call that takes longer stops the run, named


class EnvConfig(Section):
    """Multi-turn rollouts (docs/environments.md); no ``name`` = single-turn generation."""

    name: str | None = None  # a registered environment (tool_use, simulated_user, single_turn) or module:Class
    kwargs: dict[str, Any] = Field(default_factory=dict)
    max_turns: int = Field(4, ge=1)  # policy turns per trajectory
    max_total_tokens: int = Field(128, ge=1)  # response budget: all policy turns and observations together


class MonitorConfig(Section):
    """Reward-hacking monitors, logged every RL step (docs/rewards.md)."""

    verifier: str | None = None  # a held-out reward scoring the same samples (name or module:attr)
    verifier_kwargs: dict[str, Any] = Field(default_factory=dict)
    window: int = Field(8, ge=2)  # steps over which trends (slopes) are measured
    min_slope: float = Field(0.0, ge=0)  # alarm: reward slope > min_slope while verifier slope < -min_slope


class TrainConfig(Section):
    steps: int = Field(100, ge=0)
    prompts_per_step: int = Field(8, ge=1)
    mini_batch_size: int = Field(64, ge=1)
    micro_batch_size: int = Field(64, ge=1)
    # The policy/critic update's micro-batches by padded tokens instead of rows: rows are sorted by
    # length and packed while rows x (longest prompt + longest response) fits (one process only).
    micro_batch_tokens: int | None = Field(None, ge=1)
    optim: OptimConfig = Field(default_factory=OptimConfig)
    critic_optim: OptimConfig = Field(default_factory=lambda: OptimConfig(lr=5e-4))
    # The actor's (and critic's) train engine, by name (train/backends.py): single | fsdp2 | deepspeed
    backend: str = "single"
    world_size: int = Field(1, ge=1)  # data-parallel trainer ranks per trainer role (runtime.kind=ray when > 1)
    zero_stage: Literal[2, 3] = 2  # backend deepspeed: ZeRO-2 (gradients + optimizer state partitioned) or 3 (+ parameters)

    @field_validator("backend")
    @classmethod
    def _known_backend(cls, name: str) -> str:
        from rlxf.train.backends import TRAIN_ENGINES

        known = TRAIN_ENGINES.names()
        if name not in known:
            raise ValueError(f"unknown train backend {name!r}; known: {known}")
        return name

    def engine_options(self) -> dict[str, Any]:
        """The keywords of ``build_train_engine(backend, model, optim, **options)`` for this backend
        (each backend's own typed keys; a key of another backend is ignored, so a run can switch
        backends on resume without unsetting it)."""
        return {"zero_stage": self.zero_stage} if self.backend == "deepspeed" else {}


class SFTConfig(Section):
    steps: int = Field(0, ge=0)  # 0 = no SFT stage
    batch_size: int = Field(64, ge=1)
    optim: OptimConfig = Field(default_factory=lambda: OptimConfig(lr=1e-3))


class PreferenceConfig(Section):
    """The pair loops (``loop: dpo``, ``online_dpo`` and ``reward_model``); batch sizes count pairs
    (``online_dpo``: prompts, each giving at most one pair)."""

    loss: PreferenceLossConfig = Field(default_factory=PreferenceLossConfig)  # dpo | ipo | cdpo | simpo
    steps: int = Field(100, ge=0)
    batch_size: int = Field(32, ge=1)  # pairs per optimizer step
    micro_batch_size: int = Field(32, ge=1)  # pairs per forward/backward pass
    optim: OptimConfig = Field(default_factory=lambda: OptimConfig(lr=1e-4))


class EvalConfig(Section):
    every: int = Field(25, ge=0)  # steps between held-out evaluations; 0 = only at start and end
    batch_size: int = Field(256, ge=1)
    max_new_tokens: int | None = None  # default: rollout.max_new_tokens
    reward: RewardConfig | None = None  # held-out scoring; default: the training reward (e.g. the rule while training on a reward model)


class CheckpointConfig(Section):
    every: int = Field(50, ge=0)  # RL steps between checkpoints; 0 = only at the end
    keep_last: int = Field(2, ge=1)
    # Also keep the checkpoint of the best held-out eval/accuracy (saved at that step even when not due),
    # past keep_last's rotation; summary.json names it (best_checkpoint)
    keep_best: bool = True


class AsyncRLConfig(Section):
    """``loop: rl_async`` (loops/rl_async.py): generation overlaps training, with bounded staleness."""

    max_staleness: int = Field(1, ge=0)  # trainer version - oldest token's version of a trained sample; 1 = one-step-off-policy
    queue_size: int = Field(1, ge=1)  # batches generated ahead: at most queue_size + 1 past the last one the trainer took
    interruptible: bool = True  # new weights are loaded mid-generation (partial rollouts)
    chunk_steps: int = Field(8, ge=1)  # decode steps between checks for new weights
    # Load posted weights once they are this many versions ahead of the engine's (or sooner when the
    # staleness bound holds up the next batch): each load re-prefills every unfinished row
    load_every: int = Field(1, ge=1)
    # Continuous batching: admit the next batch only while at most this many rows still decode
    # (None: as soon as the bounds allow; 0: one batch at a time)
    admit_below_rows: int | None = Field(None, ge=0)
    off_policy_correction: bool = True  # algorithm.tis_level none -> token (capped at algorithm.tis_cap)


class Config(Section):
    loop: str = "rl"  # the controller: rl (synchronous on-policy), rl_async, sft, dpo, online_dpo, reward_model; see rlxf.loops.LOOPS
    seed: int = 0
    run_dir: str = "runs/default"
    threads: int = Field(0, ge=0)  # torch intra-op threads; 0 = half the cores, at least 1 (loops/setup.default_threads)
    model: ModelConfig = Field(default_factory=ModelConfig)
    data: DataConfig = Field(default_factory=DataConfig)
    rollout: RolloutConfig = Field(default_factory=RolloutConfig)
    reward: RewardConfig = Field(default_factory=RewardConfig)
    env: EnvConfig = Field(default_factory=EnvConfig)
    monitor: MonitorConfig = Field(default_factory=MonitorConfig)
    algorithm: AlgorithmConfig = Field(default_factory=AlgorithmConfig)
    train: TrainConfig = Field(default_factory=TrainConfig)
    sft: SFTConfig = Field(default_factory=SFTConfig)
    preference: PreferenceConfig = Field(default_factory=PreferenceConfig)
    eval: EvalConfig = Field(default_factory=EvalConfig)
    checkpoint: CheckpointConfig = Field(default_factory=CheckpointConfig)
    logging: LoggingConfig = Field(default_factory=LoggingConfig)  # sinks, trackers, logged rollouts (rlxf/tracking/config.py)
    async_rl: AsyncRLConfig = Field(default_factory=AsyncRLConfig)  # loop: rl_async only
    runtime: RuntimeConfig = Field(default_factory=RuntimeConfig)  # where roles live (rlxf/runtime/config.py)

    @field_validator("loop")
    @classmethod
    def _known_loop(cls, name: str) -> str:
        from rlxf.loops import LOOPS

        if name not in LOOPS.names():
            raise ValueError(f"unknown loop {name!r}; known: {LOOPS.names()}")
        return name

    @model_validator(mode="after")
    def _batch_sizes_divide(self) -> Config:
        if self.loop not in ("rl", "rl_async"):  # the RL batch sizes mean nothing to the other loops
            return self
        rollout_batch = self.train.prompts_per_step * self.rollout.n_samples
        if rollout_batch % self.train.mini_batch_size:
            raise ValueError(
                f"train.mini_batch_size ({self.train.mini_batch_size}) must divide the rollout batch "
                f"train.prompts_per_step * rollout.n_samples = {rollout_batch}"
            )
        if self.train.mini_batch_size % self.train.micro_batch_size:
            raise ValueError(
                f"train.micro_batch_size ({self.train.micro_batch_size}) must divide "
                f"train.mini_batch_size ({self.train.mini_batch_size})"
            )
        return self

    @model_validator(mode="after")
    def _data_parallel_fits(self) -> Config:
        from rlxf.train.process_group import SINGLE_PROCESS_BACKENDS

        world = self.train.world_size
        if world == 1:
            return self
        if self.runtime.kind != "ray":
            raise ValueError(
                f"train.world_size={world} needs runtime.kind=ray (the {self.runtime.kind} runtime trains in one "
                "process); set runtime.kind=ray or train.world_size=1"
            )
        if self.train.backend in SINGLE_PROCESS_BACKENDS:
            raise ValueError(
                f"train.world_size={world} needs a data-parallel train.backend (fsdp2, deepspeed), "
                f"not {self.train.backend!r}"
            )
        if self.train.mini_batch_size % world:
            raise ValueError(
                f"train.world_size ({world}) must divide train.mini_batch_size ({self.train.mini_batch_size}): "
                "every rank trains on an equal slice of each mini-batch"
            )
        return self


    @model_validator(mode="after")
    def _settings_work_together(self) -> Config:
        """loop x rollout engine x runtime x train backend (and the loop's other needs), at load: a run
        must not load, evaluate and then die on a pair it cannot run (rlxf.loops.LOOP_NEEDS)."""
        from rlxf.loops import LOOP_NEEDS
        from rlxf.rollout.engine import ROLLOUT_ENGINES
        from rlxf.runtime import RUNTIMES

        for key, value, registry in (("rollout.engine", self.rollout.engine, ROLLOUT_ENGINES),
                                     ("runtime.kind", self.runtime.kind, RUNTIMES)):
            if value not in registry.names():
                raise ValueError(f"unknown {key} {value!r}; known: {registry.names()}")
        needs = LOOP_NEEDS.get(self.loop)
        for refusal in _LOOP_REFUSALS if needs else ():
            problem = refusal(self, needs)
            if problem:
                raise ValueError(f"loop={self.loop} {problem}" + (f": {needs.why}" if needs.why else ""))
        return self


def _missing_engine_capabilities(config: Config, needs) -> str | None:
    from rlxf.rollout.engine import ROLLOUT_ENGINES, engine_capabilities

    have = engine_capabilities(config.rollout.engine)
    missing = needs.rollout_capabilities - have
    if not missing:
        return None
    able = [name for name in ROLLOUT_ENGINES.names() if needs.rollout_capabilities <= engine_capabilities(name)]
    return (f"needs a rollout engine that is {', '.join(sorted(missing))}; rollout.engine={config.rollout.engine} "
            f"is not (use rollout.engine={' or '.join(able)})")


def _unsupported_choice(key: str, allowed_of) -> Callable[[Config, Any], str | None]:
    """A refusal of ``key``'s value (a dotted config path) when the loop's needs name the values it runs with."""

    def refuse(config: Config, needs) -> str | None:
        allowed, value = allowed_of(needs), _dotted(config, key)
        if allowed is None or value in allowed:
            return None
        return f"runs only with {key} in {sorted(allowed)}; {key}={value} is not supported"

    return refuse


def _unsupported_feature(key: str, supported_of, in_use) -> Callable[[Config, Any], str | None]:
    def refuse(config: Config, needs) -> str | None:
        if supported_of(needs) or not in_use(config):
            return None
        return f"does not support {key}={_dotted(config, key)}"

    return refuse


def _dotted(config: Config, key: str) -> Any:
    node: Any = config
    for part in key.split("."):
        node = getattr(node, part)
    return node


# Each returns what is wrong with the config for the loop's LoopNeeds, or None.
_LOOP_REFUSALS: tuple[Callable[[Config, Any], str | None], ...] = (
    _missing_engine_capabilities,
    _unsupported_choice("runtime.kind", lambda needs: needs.runtimes),
    _unsupported_choice("train.backend", lambda needs: needs.backends),
    _unsupported_feature("env.name", lambda needs: needs.multi_turn, lambda c: c.env.name is not None),
    _unsupported_feature("algorithm.dynamic_sampling", lambda needs: needs.dynamic_sampling,
                         lambda c: c.algorithm.dynamic_sampling),
    _unsupported_feature("algorithm.advantage_estimator", lambda needs: needs.greedy_baseline,
                         lambda c: c.algorithm.needs_greedy_baseline),
)


def parse_override(text: str) -> tuple[list[str], Any]:
    if "=" not in text:
        raise ConfigError(f"override {text!r} is not of the form key.path=value")
    key, raw = text.split("=", 1)
    if not key or any(not part for part in key.split(".")):
        raise ConfigError(f"override {text!r} has an empty key")
    return key.split("."), _parse_value(raw)


def _parse_value(raw: str) -> Any:
    """YAML scalars and lists, plus the floats YAML 1.1 reads as strings (``3e-4``)."""
    value = yaml.safe_load(raw) if raw != "" else ""
    if isinstance(value, str):
        try:
            return float(value)
        except ValueError:
            return value
    return value


def apply_override(tree: dict, path: list[str], value: Any) -> None:
    node = tree
    for part in path[:-1]:
        child = node.setdefault(part, {})
        if not isinstance(child, dict):
            raise ConfigError(f"cannot set {'.'.join(path)}: {part} is not a section")
        node = child
    node[path[-1]] = value


def _format_validation_error(err: ValidationError) -> str:
    lines = []
    for item in err.errors():
        where = ".".join(str(p) for p in item["loc"]) or "(top level)"
        if item["type"] == "extra_forbidden":
            lines.append(f"unknown config key {where!r}")
        else:
            got = item.get("input")
            shown = f" (got {got!r})" if not isinstance(got, dict) else ""
            lines.append(f"config key {where!r}: {item['msg']}{shown}")
    return "; ".join(lines)


def build_config(tree: dict) -> Config:
    try:
        return Config.model_validate(tree)
    except ValidationError as err:
        raise ConfigError(_format_validation_error(err)) from None


def load_config(recipe: str | Path | None = None, overrides: list[str] | tuple[str, ...] = ()) -> Config:
    path = Path(recipe) if recipe else DEFAULT_RECIPE
    if not path.exists():
        raise ConfigError(f"recipe {str(path)!r} does not exist")
    tree = yaml.safe_load(path.read_text()) or {}
    if not isinstance(tree, dict):
        raise ConfigError(f"recipe {str(path)!r} must be a YAML mapping at the top level")
    for text in overrides:
        key, value = parse_override(text)
        apply_override(tree, key, value)
    return build_config(tree)


def dump_config(config: Config) -> str:
    return yaml.safe_dump(config.model_dump(mode="json"), sort_keys=False)
