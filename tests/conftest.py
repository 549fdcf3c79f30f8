"""Shared fixtures: a tiny model built once per session, small configs for fast loop runs."""

from __future__ import annotations

import os

import pytest
import torch
import transformers

transformers.utils.logging.disable_progress_bar()
transformers.utils.logging.set_verbosity_error()


@pytest.fixture(scope="session")
def tiny_model_dir(tmp_path_factory) -> str:
    from rlxf.models.tiny import build_tiny_model

    return str(build_tiny_model(tmp_path_factory.mktemp("models") / "tiny", hidden_size=64, num_layers=2,
                                num_heads=2, intermediate_size=128))


@pytest.fixture(scope="session")
def tiny_model(tiny_model_dir):
    from rlxf.models.loading import load_causal_lm

    return load_causal_lm(tiny_model_dir)


@pytest.fixture(scope="session")
def tokenizer(tiny_model_dir):
    from rlxf.models.loading import load_tokenizer

    return load_tokenizer(tiny_model_dir)


def small_overrides(run_dir, model_dir, steps: int = 3) -> list[str]:
    """A recipe small enough to run in seconds: tiny model, few steps, small eval."""
    return [
        f"run_dir={run_dir}", f"model.path={model_dir}", f"train.steps={steps}",
        "train.prompts_per_step=4", "rollout.n_samples=4", "train.mini_batch_size=16",
        "train.micro_batch_size=8", "sft.steps=5", "sft.batch_size=16", "data.eval_size=16",
        "eval.every=0", "checkpoint.every=1", "logging.progress_bar=false", "logging.sinks=[jsonl]",
    ]


@pytest.fixture(autouse=True, scope="session")
def _threads():
    # Tests are many small ops: one thread avoids oversubscription when CI runs them on 2 cores.
    previous = torch.get_num_threads()
    torch.set_num_threads(1)
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    yield
    torch.set_num_threads(previous)


@pytest.fixture(autouse=True, scope="session")
def _user_cache_in_tmp(tmp_path_factory):
    # tiny:NAME models are built in the user cache (models/cache_dir.py): tests build theirs in a temporary one.
    previous = os.environ.get("RLXF_CACHE_DIR")
    os.environ["RLXF_CACHE_DIR"] = str(tmp_path_factory.mktemp("rlxf-cache"))
    yield
    if previous is None:
        os.environ.pop("RLXF_CACHE_DIR", None)
    else:
        os.environ["RLXF_CACHE_DIR"] = previous
