"""Every loop x rollout engine x runtime x train backend: refused at config load, naming both settings,
or it runs a step. (Before, ``loop=rl_async rollout.engine=hf`` loaded, evaluated, then died with an
AttributeError inside the producer.)"""

import importlib.util
import itertools
import json

import pytest

from rlxf.checked_config import load_config
from rlxf.config import ConfigError
from rlxf.loops import LOOP_MODULES, get_loop
from tests.conftest import small_overrides

LOOPS = sorted(LOOP_MODULES)
ENGINES = ("torch", "hf", "vllm")
RUNTIMES = ("embedded", "process", "ray")
BACKENDS = ("single", "fsdp2", "deepspeed")
COMBINATIONS = list(itertools.product(LOOPS, ENGINES, RUNTIMES, BACKENDS))
OFFLINE = {"sft", "dpo", "reward_model", "online_dpo"}
PAIRS = ["data.task=arithmetic_preferences", "data.task_args={digits: 2, b_digits: 1}", "preference.steps=1",
         "preference.batch_size=8", "preference.micro_batch_size=4"]
LOOP_OVERRIDES = {"sft": ["sft.steps=1"], "dpo": PAIRS, "reward_model": PAIRS, "rl": [], "rl_async": [],
                  "online_dpo": ["preference.steps=1", "preference.batch_size=8", "preference.micro_batch_size=4"]}


def expected_refusal(loop: str, engine: str, runtime: str, backend: str) -> tuple[str, str] | None:
    """The pair of settings the config must name, worked out by hand from what each loop does."""
    if loop == "rl_async" and engine != "torch":  # only the built-in engine pauses between decode steps
        return f"loop={loop}", f"rollout.engine={engine}"
    if loop in OFFLINE and runtime != "embedded":  # one model trained in this process
        return f"loop={loop}", f"runtime.kind={runtime}"
    if loop in OFFLINE and backend != "single":
        return f"loop={loop}", f"train.backend={backend}"
    return None


def settings(loop, engine, runtime, backend) -> list[str]:
    return [f"loop={loop}", f"rollout.engine={engine}", f"runtime.kind={runtime}", f"train.backend={backend}"]


@pytest.mark.parametrize(("loop", "engine", "runtime", "backend"), COMBINATIONS)
def test_each_combination_loads_or_is_refused_naming_both(loop, engine, runtime, backend):
    refusal = expected_refusal(loop, engine, runtime, backend)
    if refusal is None:
        config = load_config(None, settings(loop, engine, runtime, backend))
        assert (config.loop, config.rollout.engine, config.runtime.kind, config.train.backend) == (
            loop, engine, runtime, backend)
        return
    with pytest.raises(ConfigError) as error:
        load_config(None, settings(loop, engine, runtime, backend))
    first, second = refusal
    assert first in str(error.value) and second in str(error.value), str(error.value)


def test_the_reported_case_is_refused_before_anything_runs():
    with pytest.raises(ConfigError, match=r"loop=rl_async needs a rollout engine that is interruptible; "
                                          r"rollout\.engine=hf is not \(use rollout\.engine=torch\)"):
        load_config(None, ["loop=rl_async", "rollout.engine=hf"])


@pytest.mark.parametrize(("overrides", "named"), [
    (["env.name=tool_use"], "env.name=tool_use"),
    (["algorithm.name=dapo"], "algorithm.dynamic_sampling=True"),
    (["algorithm.name=remax"], "algorithm.advantage_estimator=remax"),
])
def test_what_the_async_loop_does_not_support_is_refused_at_load(overrides, named):
    with pytest.raises(ConfigError, match="loop=rl_async does not support " + named.replace(".", r"\.")):
        load_config(None, ["loop=rl_async", *overrides])


@pytest.mark.parametrize(("key", "value"), [("rollout.engine", "sglang"), ("runtime.kind", "slurm")])
def test_unknown_engine_or_runtime_is_named_at_load(key, value):
    with pytest.raises(ConfigError, match=f"unknown {key} '{value}'"):
        load_config(None, [f"{key}={value}"])


def run_one_step(tmp_path, model_dir, loop, engine, runtime, backend) -> list[dict]:
    run_dir = tmp_path / f"{loop}-{engine}-{runtime}-{backend}"
    overrides = [*small_overrides(run_dir, model_dir, steps=1), "sft.steps=0", *LOOP_OVERRIDES[loop],
                 *settings(loop, engine, runtime, backend)]
    get_loop(loop)(load_config(None, overrides), write=lambda _: None)
    return [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]


RUNNABLE = [c for c in COMBINATIONS if expected_refusal(*c) is None]
FAST = [("rl", "hf", "embedded", "single"), ("rl_async", "torch", "embedded", "single"),
        ("sft", "hf", "embedded", "single")]


@pytest.mark.parametrize(("loop", "engine", "runtime", "backend"), FAST)
def test_accepted_combinations_run_a_step(tmp_path, tiny_model_dir, loop, engine, runtime, backend):
    rows = run_one_step(tmp_path, tiny_model_dir, loop, engine, runtime, backend)
    assert [r["step"] for r in rows] == [0, 1]


@pytest.mark.slow
@pytest.mark.parametrize(("loop", "engine", "runtime", "backend"), [c for c in RUNNABLE if c not in FAST])
def test_every_accepted_combination_runs_a_step(tmp_path, tiny_model_dir, loop, engine, runtime, backend):
    if engine == "vllm" and importlib.util.find_spec("vllm") is None:
        pytest.skip("vllm is not installed: rollout.engine=vllm is refused when the engine is built")
    if runtime == "ray":
        pytest.importorskip("ray")
    rows = run_one_step(tmp_path, tiny_model_dir, loop, engine, runtime, backend)
    assert [r["step"] for r in rows] == [0, 1]
