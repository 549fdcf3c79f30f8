"""train.backend / train.world_size: what the config refuses (with the key named) and a 1-rank FSDP2 (or tp)
run in this process that gives the single-process run's numbers."""

from __future__ import annotations

import json

import pytest
import torch.distributed as dist

from rlxf.checked_config import load_config
from rlxf.config import ConfigError
from rlxf.loops.rl import train_rl
from tests.conftest import small_overrides

SIGNAL = ["sft.steps=40", "train.mini_batch_size=8", "train.micro_batch_size=4"]  # non-zero advantages, 2 optimizer steps


def test_defaults_are_one_single_process_rank():
    config = load_config(None, [])
    assert (config.train.backend, config.train.world_size) == ("single", 1)


@pytest.mark.parametrize("overrides, message", [
    (["train.backend=megatron"], r"train\.backend.*unknown train backend 'megatron'; known: \['deepspeed', 'fsdp2', 'single', 'tp'\]"),
    (["runtime.kind=ray", "train.backend=tp", "train.world_size=2"],
     r"train\.backend=tp with train\.world_size=2: the ranks of a tensor-parallel group must see the same rows"),
    (["train.backend=fsdp2", "train.world_size=2"], r"train\.world_size=2 needs runtime\.kind=ray"),
    (["runtime.kind=ray", "train.world_size=2"], r"needs a data-parallel train\.backend .*not 'single'"),
    (["runtime.kind=ray", "train.backend=fsdp2", "train.world_size=3"],
     r"train\.world_size \(3\) must divide train\.mini_batch_size \(128\)"),
    (["train.world_size=0"], r"train\.world_size"),
    (["train.backend=deepspeed", "train.zero_stage=4"], r"config key 'train\.zero_stage': Input should be 2 or 3"),
])
def test_config_errors_name_the_key(overrides, message):
    with pytest.raises(ConfigError, match=message):
        load_config(None, overrides)


@pytest.mark.parametrize("overrides, options", [
    (["train.backend=deepspeed"], {"zero_stage": 2}),
    (["train.backend=deepspeed", "train.zero_stage=3"], {"zero_stage": 3}),
    (["train.backend=fsdp2", "train.zero_stage=3"], {}),  # another backend's key is ignored (resume may switch)
    (["train.backend=tp"], {"tensor_parallel": None}),
    (["train.backend=tp", "train.tensor_parallel=1"], {"tensor_parallel": 1}),
    (["train.backend=fsdp2", "train.tensor_parallel=2"], {}),
    ([], {}),
])
def test_engine_options_are_the_backends_own_keys(overrides, options):
    assert load_config(None, overrides).train.engine_options() == options


@pytest.mark.parametrize("backend", ["fsdp2", "tp"])  # tp: a 1 x 1 (dp, tp) mesh, DTensor layers on one rank
def test_one_rank_backend_in_this_process_matches_the_single_engine(tmp_path, tiny_model_dir, backend):
    def run(name, *extra):
        config = load_config(None, [*small_overrides(tmp_path / name, tiny_model_dir, steps=2), *SIGNAL, *extra])
        train_rl(config, write=lambda _: None)
        rows = [json.loads(line) for line in (tmp_path / name / "metrics.jsonl").read_text().splitlines()]
        return [{k: v for k, v in r.items() if not k.startswith("time/")} for r in rows]

    single = run("single")
    try:
        extra = ["train.tensor_parallel=1"] if backend == "tp" else []
        fsdp = run(backend, f"train.backend={backend}", *extra)  # a 1-rank gloo group in this process
    finally:
        if dist.is_initialized():
            dist.destroy_process_group()
    assert abs(single[1]["policy/loss"]) > 1e-3  # the comparison is not vacuous: the policy trains
    for row, expected in zip(fsdp, single):
        # rel 1e-6: tp's gradient norm sums squares in another order (measured 3.4e-7 relative on a norm of 3.5)
        assert row == pytest.approx(expected, abs=1e-6, rel=1e-6, nan_ok=True)
