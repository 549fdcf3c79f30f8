"""``AlgorithmConfig``: which estimator, loss, aggregation and KL, and their knobs.

``name`` picks a preset (``PRESETS``); every field not given is filled from it, so
``AlgorithmConfig(name="ppo")`` is a full PPO setup and ``AlgorithmConfig(name="ppo", clip_high=0.28)``
changes one knob. A field given as None also takes the preset's value, except the fields where None
is a setting of its own (``dual_clip``, ``value_clip``, ``kl_target``: None means "off").
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from rlxf.algos.advantages import ADVANTAGE_ESTIMATORS, CRITIC_ESTIMATORS, TEACHER_ESTIMATORS, TURN_ESTIMATORS
from rlxf.algos.aggregation import LOSS_AGGREGATIONS
from rlxf.algos.kl import KL_ESTIMATORS
from rlxf.algos.policy_losses import POLICY_LOSSES
from rlxf.algos.presets import PRESET_SOURCES, PRESETS
from rlxf.algos.rollout_masks import ROLLOUT_MASKS, rollout_mask_band

_NULLABLE = frozenset({"dual_clip", "value_clip", "kl_target", "rollout_mask_low", "rollout_mask_high"})
GREEDY_BASELINE_ESTIMATORS = frozenset({"remax"})  # advantage estimators that need a greedy rollout

# Fields default to None = "take the preset's value"; the validator below fills them.


class AlgorithmConfig(BaseModel):
    model_config = ConfigDict(extra="forbid")

    name: str = Field("grpo", description="preset to start from; see describe_presets()")

    advantage_estimator: str = Field(None, description="ADVANTAGE_ESTIMATORS name")
    policy_loss: str = Field(None, description="POLICY_LOSSES name")
    loss_aggregation: str = Field(None, description="LOSS_AGGREGATIONS name")
    kl_estimator: str = Field(None, description="KL_ESTIMATORS name: k1, k2, k3")

    clip_low: float = Field(None, ge=0, le=1, description="ratio lower bound is 1 - clip_low")
    clip_high: float = Field(None, ge=0, description="ratio upper bound is 1 + clip_high")
    dual_clip: float | None = Field(None, gt=1, description="cap -A*dual_clip on the loss when A < 0; None: off")

    gamma: float = Field(None, ge=0, le=1, description="discount over response tokens")
    lam: float = Field(None, ge=0, le=1, description="GAE lambda")
    norm_adv_by_std: bool = Field(None, description="divide advantages by the group (grpo) or batch std")
    adv_eps: float = Field(None, gt=0, description="added to the std before dividing")

    kl_coef: float = Field(None, ge=0, description="KL coefficient; 0 skips the reference model entirely")
    kl_in_reward: bool = Field(None, description="True: per-token penalty in the reward; False: term in the loss")
    kl_target: float | None = Field(None, gt=0, description="adaptive KL target (sequence KL); None: fixed coef")
    kl_horizon: int = Field(None, gt=0, description="adaptive KL horizon, in samples")
    # Not from a preset: on for all of them (None: off). veRL clamps its k3 the same way.
    kl_cap: float | None = Field(10.0, gt=0, description="per-token KL estimate clamped to [-kl_cap, kl_cap]")

    # Not from a preset (no preset distils): 0 = the teacher's log-ratio alone.
    distill_task_coef: float = Field(0.0, ge=0, description="on_policy_distillation: weight of the task's "
                                     "group-relative score added to the teacher's per-token log-ratio")

    # Not from a preset (no preset credits turns): read by the turn-level estimators only.
    turn_gamma: float = Field(1.0, ge=0, le=1, description="turn_grpo, gigpo: discount per policy turn of the "
                              "return-to-go from each turn")
    step_advantage_weight: float = Field(0.5, ge=0, le=1, description="gigpo: w in (1 - w) * episode advantage "
                                         "+ w * step-group advantage")

    entropy_coef: float = Field(None, description="entropy bonus coefficient (subtracted from the loss)")

    use_critic: bool = Field(None, description="train a value model (needed by gae)")
    value_clip: float | None = Field(None, gt=0, description="value clipping range; None: unclipped")
    value_coef: float = Field(None, ge=0, description="value-loss weight if the critic shares the optimizer")

    ppo_epochs: int = Field(None, ge=1, description="passes over each rollout batch")

    tis_level: Literal["none", "token", "sequence"] = Field(None, description="truncated IS vs rollout log-probs")
    tis_cap: float = Field(None, gt=0, description="truncated IS weight cap")
    rollout_mask: str = Field(None, description="ROLLOUT_MASKS name: none, mis_token, mis_sequence, icepop, "
                                                "geometric (algos/rollout_masks.py)")
    rollout_mask_low: float | None = Field(None, gt=0, description="band's lower bound on pi_train/pi_rollout; "
                                                                   "None: the mode's default")
    rollout_mask_high: float | None = Field(None, gt=0, description="band's upper bound; None: the mode's default")

    dynamic_sampling: bool = Field(None, description="DAPO: drop groups whose rewards are all equal, resample")
    max_sampling_rounds: int = Field(None, ge=1, description="DAPO: rollout rounds allowed to fill a batch")
    overlong_buffer_len: int = Field(None, ge=0, description="DAPO soft overlong buffer in tokens; 0: off")
    overlong_penalty: float = Field(None, ge=0, description="DAPO: penalty at the length limit")
    filter_overlong: bool = Field(None, description="zero the loss mask of truncated responses")

    @model_validator(mode="before")
    @classmethod
    def _fill_from_preset(cls, data: Any) -> Any:
        if not isinstance(data, dict):
            return data
        name = data.get("name") or "grpo"
        if name not in PRESETS:
            raise ValueError(f"unknown algorithm preset {name!r}; known: {', '.join(sorted(PRESETS))}")
        given = {k: data[k] for k in PRESETS[name] if k in data}
        if len(given) == len(PRESETS[name]) and given != PRESETS[name]:
            # every field spelled out, and they are another preset's: the name says one algorithm, the
            # fields train another (a saved config whose name was edited by hand)
            twin = next((other for other, values in PRESETS.items() if values == given), None)
            if twin is not None:
                raise ValueError(f"algorithm.name={name} but every other algorithm field is preset {twin}'s "
                                 f"(advantage_estimator={given['advantage_estimator']}, use_critic="
                                 f"{str(given['use_critic']).lower()}): remove those fields to train {name}, or set "
                                 f"algorithm.name={twin}")
        filled = {"name": name}
        for key, preset_value in PRESETS[name].items():
            if key not in data or (data[key] is None and key not in _NULLABLE):
                filled[key] = preset_value
            else:
                filled[key] = data[key]
        unknown = {k: v for k, v in data.items() if k not in filled}
        return {**filled, **unknown}  # unknown keys are rejected by extra="forbid"

    @model_validator(mode="after")
    def _check_names(self) -> AlgorithmConfig:
        for field_name, registry in (
            ("advantage_estimator", ADVANTAGE_ESTIMATORS),
            ("policy_loss", POLICY_LOSSES),
            ("loss_aggregation", LOSS_AGGREGATIONS),
            ("kl_estimator", KL_ESTIMATORS),
        ):
            value = getattr(self, field_name)
            if value not in registry:
                raise ValueError(f"{field_name}: unknown {registry.kind} {value!r}; known: {', '.join(registry.names())}")
        if self.rollout_mask not in ROLLOUT_MASKS:
            raise ValueError(f"rollout_mask: unknown {ROLLOUT_MASKS.kind} {self.rollout_mask!r}; "
                             f"known: {', '.join(ROLLOUT_MASKS.names())}")
        self._check_rollout_mask()
        if self.advantage_estimator in CRITIC_ESTIMATORS and not self.use_critic:
            raise ValueError(f"advantage_estimator {self.advantage_estimator!r} needs a critic: set use_critic=True")
        if self.kl_target is not None and self.kl_coef <= 0:
            raise ValueError("kl_target (adaptive KL) needs kl_coef > 0 as its starting value")
        return self

    def _check_rollout_mask(self) -> None:
        spec = ROLLOUT_MASKS.get(self.rollout_mask)
        if spec is None:
            return
        low, high = rollout_mask_band(self.rollout_mask, self.rollout_mask_low, self.rollout_mask_high)
        if not low < high:
            raise ValueError(f"rollout_mask {self.rollout_mask!r}: band [{low:g}, {high:g}] needs low < high")
        if spec.weighted and self.tis_level != "none":
            raise ValueError(f"rollout_mask {self.rollout_mask!r} weights the tokens it keeps by their ratio; "
                             f"set tis_level 'none' (only 'geometric' combines with TIS)")

    @property
    def needs_greedy_baseline(self) -> bool:
        """The estimator's baseline is the reward of a greedy rollout per prompt (ReMax)."""
        return self.advantage_estimator in GREEDY_BASELINE_ESTIMATORS

    @property
    def uses_teacher(self) -> bool:
        """The estimator reads a teacher model's log-probs (``model.teacher_path``)."""
        return self.advantage_estimator in TEACHER_ESTIMATORS

    @property
    def uses_turns(self) -> bool:
        """The estimator credits each turn: the loop hands it the rollout's turn layout."""
        return self.advantage_estimator in TURN_ESTIMATORS

    @property
    def uses_reference(self) -> bool:
        """Whether a reference model is needed at all (``kl_coef > 0``)."""
        return self.kl_coef > 0


def describe_presets() -> str:
    """A plain-text table of the presets (printed by ``rlxf algorithms``)."""
    header = ("preset", "advantage", "policy loss", "aggregation", "clip (low/high)", "KL (when kl_coef>0)", "critic", "source")
    rows = [header]
    for name, p in PRESETS.items():
        kl = f"{p['kl_estimator']} in {'reward' if p['kl_in_reward'] else 'loss'}"
        advantage = p["advantage_estimator"] + ("" if p["norm_adv_by_std"] else " (no std)")
        rows.append(
            (name, advantage, p["policy_loss"], p["loss_aggregation"], f"{p['clip_low']:g}/{p['clip_high']:g}",
             kl, "yes" if p["use_critic"] else "no", PRESET_SOURCES[name])
        )
    widths = [max(len(row[i]) for row in rows) for i in range(len(header))]
    lines = ["  ".join(cell.ljust(w) for cell, w in zip(row, widths, strict=True)).rstrip() for row in rows]
    lines.insert(1, "  ".join("-" * w for w in widths))
    return "\n".join(lines)
