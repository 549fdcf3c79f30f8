"""The typed config tree, loaded from a YAML recipe plus dotted ``key=value`` overrides.

Every section forbids unknown keys, so a typo fails at start-up with the dotted path of the key; names
are checked at load too (task and the task's keyword arguments, reward, algorithm names, backend), and
every key has a description (``rlxf config show`` prints them with the values and defaults). This
module imports no loop: the checks that need the loops (the loop's name; loop x engine x runtime x
backend) are ``rlxf.checked_config``'s, whose ``load_config`` / ``build_config`` load a recipe.
Batch sizes are counted in *trajectories* (one prompt + one response) unless the name says prompts:

* ``train.prompts_per_step``  prompts drawn per RL step; each gets ``rollout.n_samples`` responses,
  so a step holds ``prompts_per_step * n_samples`` trajectories (the rollout batch);
* ``train.mini_batch_size``   trajectories per optimizer step (the rollout batch is split into
  ``rollout batch / mini_batch_size`` optimizer steps per PPO epoch);
* ``train.micro_batch_size``  trajectories per forward/backward pass (gradient accumulation inside a
  mini-batch; it changes memory use and speed, never the result — see docs/algorithms.md).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from rlxf.algos.config import AlgorithmConfig
from rlxf.algos.preference_losses import PreferenceLossConfig
from rlxf.config_error import ConfigError
from rlxf.models.lora_config import LoraConfig
from rlxf.overrides import apply_overrides, parse_override, read_recipe
from rlxf.runtime.config import RuntimeConfig
from rlxf.tracking.config import LoggingConfig
from rlxf.train.optim_config import OptimConfig

__all__ = ["Config", "ConfigError", "build_config_tree", "dump_config", "parse_override", "read_config_tree"]

DEFAULT_RECIPE = Path(__file__).parent / "recipes" / "default.yaml"


class Section(BaseModel):
    model_config = ConfigDict(extra="forbid", validate_assignment=True)


class ModelConfig(Section):
    """The policy: where its weights come from and how they are loaded."""

    path: str = Field("tiny:default", description="a local folder, a name in the HF cache, tiny:NAME (the "
                      "built-in tiny model, built locally on first use), a .gguf file (dequantized once into the "
                      "cache), smollm2:135m-instruct (make setup-smollm2) or layers:SPEC:SOURCE (SOURCE's decoder "
                      "layers SPEC, e.g. layers:0-23:smollm2:135m-instruct: a smaller student, built once) or "
                      "random:SOURCE (SOURCE's architecture and tokenizer, weights drawn anew: a student from scratch)")
    dtype: Literal["auto", "float32", "bfloat16", "float16"] = Field(
        "auto", description="weights' dtype; auto = the checkpoint's own")
    allow_download: bool = Field(False, description="false: only a local folder or the HF cache is read (offline)")
    disable_dropout: bool = Field(True, description="dropout off for training (as TRL does): rollout and trainer agree")
    gradient_checkpointing: bool = Field(False, description="recompute activations in backward (actor and critic): "
                                         "less memory, same gradients")
    lora: LoraConfig | None = Field(None, description="train low-rank adapters instead of every weight "
                                    "(pip install 'rlxf[lora]'); null = full fine-tuning")
    device: str = Field("auto", description="auto = cuda when available, else cpu")
    critic_path: str | None = Field(None, description="PPO critic initialisation; null = the policy's path")
    teacher_path: str | None = Field(None, description="on-policy distillation's teacher (advantage_estimator "
                                     "on_policy_distillation): a model that shares the policy's tokenizer, "
                                     "given as model.path is")

    @field_validator("path", "critic_path", "teacher_path", "device")
    @classmethod
    def _not_empty(cls, value: str | None) -> str | None:
        if value is not None and not value.strip():
            raise ValueError("is empty: give a value, or leave the key out for its default")
        return value


class DataConfig(Section):
    """The task: its training prompts and held-out problems."""

    task: str = Field("arithmetic", description="a registered task (rlxf.data.tasks.TASK_MODULES); file reads data.path")
    path: str | None = Field(None, description="JSONL / Parquet rows with `prompt` or `messages` (tasks file, "
                             "preference_file)")
    eval_path: str | None = Field(None, description="held-out rows; null = the last data.eval_size rows of data.path")
    eval_size: int = Field(200, ge=1, description="held-out problems")
    chat_template: bool = Field(False, description="render `prompt` strings through the tokenizer's chat template")
    max_prompt_tokens: int = Field(256, ge=1, description="longest prompt, checked when the rows load")
    long_prompts: Literal["error", "drop"] = Field("error", description="prompts over max_prompt_tokens: stop the "
                                                   "run naming the row, or drop them (counted)")
    task_args: dict[str, Any] = Field(default_factory=dict, description="keyword arguments of the task's function")

    @field_validator("task")
    @classmethod
    def _known_task(cls, name: str) -> str:
        from rlxf.data.tasks import TASKS

        if name not in TASKS.names():
            raise ValueError(f"unknown task {name!r}; known: {', '.join(TASKS.names())}")
        return name

    @model_validator(mode="after")
    def _task_takes_its_args(self) -> DataConfig:
        from rlxf.data.tasks import task_args_problem, task_keywords

        keywords = task_keywords(self.task)
        if keywords.accepted is not None:
            unknown = sorted(set(self.task_args) - keywords.accepted)
            if unknown:
                takes = ", ".join(sorted(keywords.accepted)) or "none"
                raise ValueError(f"data.task_args {', '.join(unknown)}: task {self.task!r} does not take them "
                                 f"(it takes: {takes}); remove them from data.task_args")
        if keywords.reads_file and self.path is None:
            raise ValueError(f"data.task={self.task} reads its rows from data.path: set data.path=FILE.jsonl")
        if self.path is not None and not keywords.reads_file:
            raise ValueError(f"data.path is set but data.task={self.task} reads no file "
                             "(data.task=file or preference_file do)")
        missing = sorted(keywords.required - set(self.task_args) - {"path", "eval_path"})
        if missing:
            raise ValueError(f"data.task={self.task} needs data.task_args {', '.join(missing)}")
        problem = task_args_problem(self.task, self.task_args, self.eval_size)
        if problem:  # a value the task would refuse only once the run has started
            raise ValueError(f"{problem} (data.task={self.task})")
        return self


class RolloutConfig(Section):
    """Generation: the engine and how the policy samples."""

    engine: str = Field("torch", description="torch (built-in) | hf (transformers generate, the reference) | "
                        "vllm (optional)")
    engine_options: dict[str, Any] = Field(default_factory=dict, description="keyword arguments of the engine "
                                           "(vllm: vllm.LLM's; torch: dtype, decoder, fp32_lm_head, batch_invariant, "
                                           "share_weights)")
    n_samples: int = Field(8, ge=1, description="responses per prompt (the group of GRPO/RLOO)")
    temperature: float = Field(1.0, ge=0.0, description="sampling temperature; 0 = greedy")
    top_p: float = Field(1.0, gt=0.0, le=1.0, description="nucleus sampling; 1 = off")
    top_k: int = Field(0, ge=0, description="top-k sampling; 0 = off")
    max_new_tokens: int = Field(16, ge=1, description="response budget of one generation")

    @model_validator(mode="after")
    def _batch_invariant_is_the_torch_engines(self) -> RolloutConfig:
        if "batch_invariant" in self.engine_options and self.engine != "torch":
            raise ValueError(f"rollout.engine_options.batch_invariant (exact on-policy) is the torch engine's "
                             f"option, not rollout.engine={self.engine}'s")
        return self

    @property
    def exact_on_policy(self) -> bool:
        """``engine_options.batch_invariant: true`` on the torch engine: the trainer's old log-probs are
        then the engine's bit for bit (docs/algorithms.md, exact on-policy)."""
        return self.engine == "torch" and self.engine_options.get("batch_invariant") is True


def _check_reward_name(name: str | None) -> str | None:
    """A registered reward name, or a dotted path (``module:attr``, imported when the run builds it)."""
    from rlxf.rewards.registry import REWARDS

    if name is None or ":" in name or "." in name or name in REWARDS.names():
        return name
    raise ValueError(f"unknown reward {name!r}; known: {', '.join(REWARDS.names())} (or a dotted path module:attr)")


class RewardConfig(Section):
    """What scores a trajectory (docs/rewards.md)."""

    function: str = Field("arithmetic", description="a registered reward name, or a dotted path module:attr")
    kwargs: dict[str, Any] = Field(default_factory=dict, description="keyword arguments of the reward")
    timeout_seconds: float | None = Field(300.0, gt=0, description="a reward call that takes longer stops the run, "
                                          "named; null = no limit")

    @field_validator("function")
    @classmethod
    def _known_reward(cls, name: str) -> str:
        return _check_reward_name(name)


class EnvConfig(Section):
    """Multi-turn rollouts (docs/environments.md); no ``name`` = single-turn generation."""

    name: str | None = Field(None, description="a registered environment (tool_use, simulated_user, single_turn) "
                             "or module:Class; null = single-turn")
    kwargs: dict[str, Any] = Field(default_factory=dict, description="constructor arguments of the environment")
    max_turns: int = Field(4, ge=1, description="policy turns per trajectory")
    max_total_tokens: int = Field(128, ge=1, description="response budget: all policy turns and observations together")
    keep_kv_cache: bool = Field(True, description="keep each trajectory's KV cache across turns (the torch engine's "
                                "Llama-family decoder; others re-prefill the transcript every turn)")
    turn_barrier: bool = Field(False, description="lockstep turns: nobody decodes again until every environment of "
                               "the turn has answered (false: each trajectory advances when its own one answers)")
    max_concurrent_steps: int = Field(64, ge=1, description="environment steps running at the same time")
    max_failed_steps: int = Field(3, ge=0, description="steps in a row in which every trajectory failed before it "
                                  "was scored (every agent crashed or timed out) stop the run with the first "
                                  "failure's reason; 0 = never")


class MonitorConfig(Section):
    """Reward-hacking monitors, logged every RL step (docs/rewards.md)."""

    verifier: str | None = Field(None, description="a held-out reward scoring the same samples (name or module:attr)")
    verifier_kwargs: dict[str, Any] = Field(default_factory=dict, description="keyword arguments of the verifier")
    window: int = Field(8, ge=2, description="steps over which trends (slopes) are measured")
    min_slope: float = Field(0.0, ge=0, description="alarm: reward slope > min_slope while verifier slope < -min_slope")

    @field_validator("verifier")
    @classmethod
    def _known_verifier(cls, name: str | None) -> str | None:
        return _check_reward_name(name)


class TrainConfig(Section):
    """The RL update. Batch sizes count trajectories (one prompt + one response) unless they say prompts."""

    steps: int = Field(100, ge=0, description="RL steps")
    prompts_per_step: int = Field(8, ge=1, description="prompts drawn per step; each gets rollout.n_samples responses")
    mini_batch_size: int = Field(64, ge=1, description="trajectories per optimizer step")
    micro_batch_size: int = Field(64, ge=1, description="trajectories per forward/backward pass (memory, not result)")
    micro_batch_tokens: int | None = Field(None, ge=1, description="micro-batches by padded tokens instead of rows: "
                                           "rows sorted by length, packed while rows x longest fits; one process only")
    logits_chunk_tokens: int = Field(0, ge=0, description="the LM head over this many response tokens at a time, "
                                     "forward and backward (policy loss, old and reference log-probs): memory "
                                     "O(chunk x vocab), not O(tokens x vocab); same numbers; 0 = all logits at once")
    optim: OptimConfig = Field(default_factory=OptimConfig, description="the actor's optimizer")
    critic_optim: OptimConfig = Field(default_factory=lambda: OptimConfig(lr=5e-4), description="the critic's optimizer")
    backend: str = Field("single", description="the actor's (and critic's) train engine (train/backends.py): "
                         "single | fsdp2 | deepspeed | tp (tensor parallel; one rank in a run for now)")
    world_size: int = Field(1, ge=1, description="data-parallel trainer ranks per trainer role (needs runtime.kind=ray "
                            "when > 1)")
    zero_stage: Literal[2, 3] = Field(2, description="backend deepspeed: ZeRO-2 (gradients + optimizer state "
                                      "partitioned) or 3 (+ parameters)")
    tensor_parallel: int | None = Field(None, ge=1, description="backend tp: ranks per model replica, the rest "
                                        "FSDP2 over replicas on a (dp, tp) mesh (default: all the trainer's ranks)")

    @field_validator("backend")
    @classmethod
    def _known_backend(cls, name: str) -> str:
        from rlxf.train.backends import TRAIN_ENGINES

        known = TRAIN_ENGINES.names()
        if name not in known:
            raise ValueError(f"unknown train backend {name!r}; known: {known}")
        return name

    @model_validator(mode="after")
    def _chunked_head_backend(self) -> TrainConfig:
        # fsdp2 / ZeRO gather the head's weight inside the model's own forward, which the chunked path
        # bypasses (it calls the decoder, then reads the head's weight)
        if self.logits_chunk_tokens and self.backend != "single":
            raise ValueError(f"logits_chunk_tokens ({self.logits_chunk_tokens}) needs backend single, "
                             f"not {self.backend!r}; set train.logits_chunk_tokens=0")
        return self

    def engine_options(self) -> dict[str, Any]:
        """The keywords of ``build_train_engine(backend, model, optim, **options)`` for this backend
        (each backend's own typed keys; a key of another backend is ignored, so a run can switch
        backends on resume without unsetting it)."""
        options = {"deepspeed": {"zero_stage": self.zero_stage}, "tp": {"tensor_parallel": self.tensor_parallel}}
        return options.get(self.backend, {})


class SFTConfig(Section):
    """Supervised warm-up before RL (loop rl), or the whole run (loop sft)."""

    steps: int = Field(0, ge=0, description="SFT steps; 0 = no SFT stage")
    batch_size: int = Field(64, ge=1, description="examples per optimizer step")
    micro_batch_size: int | None = Field(
        None, ge=1, description="examples per forward/backward pass (gradients accumulate to the same step, the "
        "token mean over the whole batch); null = the whole batch at once")
    optim: OptimConfig = Field(default_factory=lambda: OptimConfig(lr=1e-3), description="the SFT optimizer")
    targets: Literal["task", "teacher"] = Field(
        "task", description="what the warm-up imitates: task = the task's own target answers; teacher = "
        "model.teacher_path's greedy answers to the same prompts, generated once before the stage (sequence-level "
        "distillation, the usual start of a student before on-policy distillation; loop rl, one-turn tasks)")


class PreferenceConfig(Section):
    """The pair loops (``loop: dpo``, ``online_dpo`` and ``reward_model``); batch sizes count pairs
    (``online_dpo``: prompts, each giving at most one pair)."""

    loss: PreferenceLossConfig = Field(default_factory=PreferenceLossConfig, description="dpo | ipo | cdpo | simpo")
    steps: int = Field(100, ge=0, description="optimizer steps")
    batch_size: int = Field(32, ge=1, description="pairs per optimizer step")
    micro_batch_size: int = Field(32, ge=1, description="pairs per forward/backward pass")
    optim: OptimConfig = Field(default_factory=lambda: OptimConfig(lr=1e-4), description="the pair loops' optimizer")


class EvalConfig(Section):
    """Held-out evaluation during a run (greedy answers to data.eval_size problems)."""

    every: int = Field(25, ge=0, description="steps between held-out evaluations; 0 = only at start and end")
    batch_size: int = Field(256, ge=1, description="problems generated at once")
    max_new_tokens: int | None = Field(None, description="null = rollout.max_new_tokens")
    reward: RewardConfig | None = Field(None, description="held-out scoring; null = the training reward (set it to "
                                        "the rule while training on a reward model)")


class CheckpointConfig(Section):
    """Checkpoints under RUN_DIR/checkpoints/step_NNNNNN (safetensors + JSON)."""

    every: int = Field(50, ge=0, description="steps between checkpoints; 0 = only at the end")
    keep_last: int = Field(2, ge=1, description="checkpoints kept (the oldest are deleted)")
    keep_best: bool = Field(True, description="also keep the checkpoint of the best held-out eval/accuracy (saved at "
                            "that step even when not due), past keep_last's rotation; summary.json names it")
    keep_optimizer: Literal["last", "none"] = Field(
        "last", description="what keeps the optimizer state (and critic) once training is done with it: last = a "
        "finished run's last checkpoint (--resume continues it; the other keep_last ones stay resumable too, "
        "rlxf prune drops theirs); none = no checkpoint of a finished run (weights only: it cannot be continued). "
        "Either way the best checkpoint holds the policy weights only once a newer one is resumable")


class AsyncRLConfig(Section):
    """``loop: rl_async`` (loops/rl_async.py): generation overlaps training, with bounded staleness."""

    max_staleness: int = Field(1, ge=0, description="trainer version - oldest token's version of a trained sample; "
                               "1 = one-step-off-policy")
    queue_size: int = Field(1, ge=1, description="batches generated ahead: at most queue_size + 1 past the last one "
                            "the trainer took")
    interruptible: bool = Field(True, description="new weights are loaded mid-generation (partial rollouts)")
    chunk_steps: int = Field(8, ge=1, description="decode steps between checks for new weights")
    load_every: int = Field(1, ge=1, description="load posted weights once this many versions ahead of the engine's "
                            "(sooner when the staleness bound holds up the next batch); each load re-prefills rows")
    admit_below_rows: int | None = Field(None, ge=0, description="continuous batching: admit the next batch only "
                                         "while at most this many rows decode; null = when the bounds allow, "
                                         "0 = one batch at a time")
    off_policy_correction: bool = Field(True, description="algorithm.tis_level none -> token (capped at "
                                        "algorithm.tis_cap), unless algorithm.rollout_mask weights tokens itself")


class Config(Section):
    """A run: which loop, on which model and task, with which reward, algorithm and resources."""

    loop: str = Field("rl", description="the controller: rl (synchronous on-policy), rl_async, sft, dpo, online_dpo, "
                      "reward_model (rlxf.loops.LOOPS)")
    seed: int = Field(0, description="seeds the model init, the prompt order, sampling and the held-out split")
    run_dir: str = Field("runs/default", description="where config.yaml, metrics.jsonl, checkpoints/ and summary.json go")
    threads: int = Field(0, ge=0, description="torch intra-op threads; 0 = half the cores, at least 1")
    model: ModelConfig = Field(default_factory=ModelConfig, description=ModelConfig.__doc__)
    data: DataConfig = Field(default_factory=DataConfig, description=DataConfig.__doc__)
    rollout: RolloutConfig = Field(default_factory=RolloutConfig, description=RolloutConfig.__doc__)
    reward: RewardConfig = Field(default_factory=RewardConfig, description=RewardConfig.__doc__)
    env: EnvConfig = Field(default_factory=EnvConfig, description=EnvConfig.__doc__)
    monitor: MonitorConfig = Field(default_factory=MonitorConfig, description=MonitorConfig.__doc__)
    algorithm: AlgorithmConfig = Field(default_factory=AlgorithmConfig, description="the RL algorithm: a preset "
                                       "(rlxf algorithms) and any of its knobs (docs/algorithms.md)")
    train: TrainConfig = Field(default_factory=TrainConfig, description=TrainConfig.__doc__)
    sft: SFTConfig = Field(default_factory=SFTConfig, description=SFTConfig.__doc__)
    preference: PreferenceConfig = Field(default_factory=PreferenceConfig, description="the pair loops (dpo, "
                                         "online_dpo, reward_model); batch sizes count pairs")
    eval: EvalConfig = Field(default_factory=EvalConfig, description=EvalConfig.__doc__)
    checkpoint: CheckpointConfig = Field(default_factory=CheckpointConfig, description=CheckpointConfig.__doc__)
    logging: LoggingConfig = Field(default_factory=LoggingConfig, description="metric sinks, trackers, logged "
                                   "rollouts (rlxf/tracking/config.py)")
    async_rl: AsyncRLConfig = Field(default_factory=AsyncRLConfig, description="loop rl_async only: staleness bound, "
                                    "queue, interruptible generation")
    runtime: RuntimeConfig = Field(default_factory=RuntimeConfig, description="where the roles live: this process, "
                                   "child processes or Ray actors (docs/distributed.md)")

    @field_validator("run_dir")
    @classmethod
    def _names_a_folder(cls, value: str) -> str:
        # '' and '.' are the working directory itself: a fresh run would move it aside
        if Path(value).name in ("", ".."):
            raise ValueError("must name a run folder (e.g. runs/my_run), not the current or a parent folder")
        return value

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
    def _groups_of_more_than_one(self) -> Config:
        from rlxf.algos.advantages import GROUP_BASELINE_ONLY

        estimator = self.algorithm.advantage_estimator
        if self.loop in ("rl", "rl_async") and self.rollout.n_samples == 1 and estimator in GROUP_BASELINE_ONLY:
            raise ValueError(f"algorithm.advantage_estimator={estimator} compares each response with the other "
                             "samples of its prompt: with rollout.n_samples=1 every advantage is 0 and nothing "
                             "trains; set rollout.n_samples=2 or more (or an estimator with another baseline: "
                             "gae, reinforce_pp, remax)")
        return self

    @model_validator(mode="after")
    def _teacher_given(self) -> Config:
        if self.loop in ("rl", "rl_async") and self.algorithm.uses_teacher and not self.model.teacher_path:
            raise ValueError(f"algorithm.advantage_estimator={self.algorithm.advantage_estimator} scores the "
                             "policy's tokens with a teacher: set model.teacher_path (a model that shares the "
                             "policy's tokenizer)")
        if self.sft.targets == "teacher":
            if self.loop not in ("rl", "rl_async") or self.env.name:
                raise ValueError("sft.targets=teacher: the teacher's answers are the warm-up of loop rl / rl_async "
                                 f"on a one-turn task (here loop {self.loop}"
                                 + (f", env.name {self.env.name}" if self.env.name else "") + ")")
            if not self.model.teacher_path:
                raise ValueError("sft.targets=teacher imitates the teacher's answers: set model.teacher_path (a model "
                                 "that shares the policy's tokenizer)")
        return self

    @model_validator(mode="after")
    def _shared_weights_in_one_process(self) -> Config:
        # rollout.engine_options.share_weights: the engine decodes with the trainer's own tensors, so no sync
        # is needed. True only for the synchronous loop, full fine-tuning, one trainer in this process.
        from rlxf.train.process_group import SINGLE_PROCESS_BACKENDS

        if self.rollout.engine_options.get("share_weights") is not True:
            return self
        problems = {
            f"loop: {self.loop} (rl only: another loop samples from weights the trainer has moved past, or "
            "syncs others)": self.loop != "rl",
            f"train.backend: {self.train.backend} (the engine decodes with a copy of the reshaped module)":
                self.train.backend not in SINGLE_PROCESS_BACKENDS,
            "model.lora (the engine decodes with merged weights, not the base ones)": self.model.lora is not None,
            f"runtime.kind: {self.runtime.kind} (the rollout role lives in another process)":
                self.runtime.kind != "embedded",
        }
        found = [what for what, bad in problems.items() if bad]
        if found:
            raise ValueError("rollout.engine_options.share_weights needs the policy and the engine in one process "
                             f"and one loop; not with {'; '.join(found)}")
        return self

    @model_validator(mode="after")
    def _data_parallel_fits(self) -> Config:
        from rlxf.train.process_group import SHARED_ROWS_BACKENDS, SINGLE_PROCESS_BACKENDS

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
        if self.train.backend in SHARED_ROWS_BACKENDS:
            raise ValueError(
                f"train.backend={self.train.backend} with train.world_size={world}: the ranks of a tensor-parallel "
                "group must see the same rows, and the Ray runtime splits rows over every rank (not wired yet); use "
                "train.backend=fsdp2 for several ranks (the tp engine itself: train/tp_engine.py)"
            )
        if self.train.mini_batch_size % world:
            raise ValueError(
                f"train.world_size ({world}) must divide train.mini_batch_size ({self.train.mini_batch_size}): "
                "every rank trains on an equal slice of each mini-batch"
            )
        return self



def _format_validation_error(err: ValidationError) -> str:
    lines = []
    for item in err.errors():
        where = ".".join(str(p) for p in item["loc"])
        message = item["msg"].removeprefix("Value error, ")
        if item["type"] == "extra_forbidden":
            lines.append(f"unknown config key {where!r}")
        elif item["type"] == "value_error" and (not where or message.startswith((f"{where}.", f"{where}="))):
            lines.append(message)  # a check of the whole tree or a section names its keys itself
        else:
            got = item.get("input")
            shown = f" (got {got!r})" if not isinstance(got, dict) and repr(got) not in message else ""
            lines.append(f"config key {where!r}: {message}{shown}")
    return "; ".join(lines)


def build_config_tree(tree: dict) -> Config:
    """The typed tree of ``tree``, without the checks that need the loops (``rlxf.checked_config``'s
    ``build_config`` adds them: call that one to load a recipe)."""
    try:
        return Config.model_validate(tree)
    except ValidationError as err:
        raise ConfigError(_format_validation_error(err)) from None


def read_config_tree(recipe: str | Path | None = None, overrides: list[str] | tuple[str, ...] = ()) -> dict:
    """The recipe (the default one when None) with the dotted overrides applied, as a plain dict."""
    tree = read_recipe(Path(recipe) if recipe else DEFAULT_RECIPE)
    return apply_overrides(tree, overrides)


def dump_config(config: Config) -> str:
    return yaml.safe_dump(config.model_dump(mode="json"), sort_keys=False)
