"""What a loop refuses to run with (``LOOP_NEEDS``), as one sentence naming the setting and what to do.

The config checks these at load (``rlxf.checked_config.check_config``), so a run never builds its models
and then dies on a pair it cannot run. Each refusal returns what is wrong with the config for the
loop's ``LoopNeeds``, or None.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from rlxf.loops import LOOP_NEEDS, LoopNeeds

if TYPE_CHECKING:
    from rlxf.config import Config

Refusal = Callable[["Config", LoopNeeds], "str | None"]


def dotted(config: Any, key: str) -> Any:
    node = config
    for part in key.split("."):
        node = getattr(node, part)
    return node


def _unrestricted_loops(exclude: str) -> str:
    """The loops that run every setting (``LoopNeeds()``): where a refused feature does work."""
    return " or ".join(f"loop={name}" for name, needs in LOOP_NEEDS.items() if name != exclude and needs == LoopNeeds())


def _missing_engine_capabilities(config: Config, needs: LoopNeeds) -> str | None:
    from rlxf.rollout.engine import ROLLOUT_ENGINES, engine_capabilities

    missing = needs.rollout_capabilities - engine_capabilities(config.rollout.engine)
    if not missing:
        return None
    able = [name for name in ROLLOUT_ENGINES.names() if needs.rollout_capabilities <= engine_capabilities(name)]
    return (f"needs a rollout engine that is {', '.join(sorted(missing))}; rollout.engine={config.rollout.engine} "
            f"is not (use rollout.engine={' or '.join(able)}): {needs.why}")


def _unsupported_choice(key: str, allowed_of: Callable[[LoopNeeds], Any]) -> Refusal:
    """A refusal of ``key``'s value (a dotted config path) when the loop's needs name the values it runs with."""

    def refuse(config: Config, needs: LoopNeeds) -> str | None:
        allowed, value = allowed_of(needs), dotted(config, key)
        if allowed is None or value in allowed:
            return None
        return f"runs only with {key} in {sorted(allowed)}; {key}={value} is not supported: {needs.why}"

    return refuse


def _unsupported_feature(key: str, supported_of: Callable[[LoopNeeds], bool], in_use: Callable[[Config], bool],
                         remedy: str) -> Refusal:
    """A refusal of a feature the loop cannot run; the message says how to turn it off, which preset turned
    it on (``algorithm.*`` keys), and which loops do run it."""

    def refuse(config: Config, needs: LoopNeeds) -> str | None:
        if supported_of(needs) or not in_use(config):
            return None
        value = dotted(config, key)
        preset = _preset_that_set(config, key, value)
        others = _unrestricted_loops(config.loop)
        return (f"does not support {key}={value}{preset} ({needs.why}); {remedy}"
                + (f", or use {others}" if others else ""))

    return refuse


def _preset_that_set(config: Config, key: str, value: Any) -> str:
    from rlxf.algos.presets import PRESETS

    section, _, field = key.partition(".")
    name = config.algorithm.name
    if section == "algorithm" and PRESETS.get(name, {}).get(field) == value:
        return f", which algorithm.name={name} turns on"
    return ""


LOOP_REFUSALS: tuple[Refusal, ...] = (
    _missing_engine_capabilities,
    _unsupported_choice("runtime.kind", lambda needs: needs.runtimes),
    _unsupported_choice("train.backend", lambda needs: needs.backends),
    _unsupported_feature("env.name", lambda needs: needs.multi_turn, lambda c: c.env.name is not None,
                         "remove env.name (single-turn generation)"),
    _unsupported_feature("algorithm.dynamic_sampling", lambda needs: needs.dynamic_sampling,
                         lambda c: c.algorithm.dynamic_sampling, "set algorithm.dynamic_sampling=false"),
    _unsupported_feature("algorithm.advantage_estimator", lambda needs: needs.greedy_baseline,
                         lambda c: c.algorithm.needs_greedy_baseline,
                         "pick an estimator without a greedy baseline (e.g. algorithm.advantage_estimator=grpo)"),
)


def refusal_of(config: Config) -> str | None:
    """The first thing the config's loop cannot run with, as one sentence, or None."""
    needs = LOOP_NEEDS.get(config.loop)
    for refusal in LOOP_REFUSALS if needs else ():
        problem = refusal(config, needs)
        if problem:
            return f"loop={config.loop} {problem}"
    return None
