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


# The SFT that gives the shared start its signal: ~4 s on one thread, once per test session.
SIGNAL_SFT = ["loop=sft", "sft.steps=60", "sft.batch_size=16", "sft.optim.lr=3e-3", "checkpoint.every=0"]


@pytest.fixture
def trained_batches(monkeypatch) -> list:
    """The batches the RL loop trains on, in order: ``rl.train_on_batch`` still runs, and records each."""
    from rlxf.loops import rl

    trained, original = [], rl.train_on_batch

    def keep_batch(session, batch, *args):
        original(session, batch, *args)
        trained.append(batch)

    monkeypatch.setattr(rl, "train_on_batch", keep_batch)
    return trained


@pytest.fixture(scope="session")
def sft_model_dir(tmp_path_factory, tiny_model_dir) -> str:
    """The tiny model after a short SFT on the default task: it writes the answer format most of the
    time (reward/format about 0.6-0.9 at temperature 1) and gets a few sums right (held-out accuracy
    about 0.1), so an RL step from it has rewards that differ within a group and a non-zero gradient.
    Runs that are compared for equality start here: a comparison of two runs that never train is a
    comparison of zeros (the raw tiny model scores reward 0 and gets grad norm 0 on most steps)."""
    from rlxf.checked_config import load_config
    from rlxf.loops import get_loop

    run_dir = tmp_path_factory.mktemp("sft_start")
    config = load_config(None, [*small_overrides(run_dir, tiny_model_dir), *SIGNAL_SFT])
    get_loop("sft")(config, write=lambda _: None)
    return str(run_dir / "checkpoints" / "step_000060" / "policy")


def assert_trains(rows: list[dict]) -> None:
    """The RL steps in ``rows`` (metric rows of a run) learned something: rewards differ within a group
    (else GRPO's advantages are 0) and the gradient is non-zero on every step but at most one (a step
    whose every group agrees has no GRPO gradient; from the SFT start that happens about 1 step in 6).
    Put beside every assertion that two runs are equal, so that the equality is not one of zeros."""
    steps = [r for r in rows if "policy/grad_norm" in r]
    norms = [r["policy/grad_norm"] for r in steps]
    assert steps and sum(n > 1e-3 for n in norms) >= max(1, len(steps) - 1), norms
    assert sum(r["reward/mean"] for r in steps) > 0, [r["reward/mean"] for r in steps]


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


# `make test` runs the suite on two pytest-xdist workers. The tests that start Ray clusters, role processes or
# torch.distributed process groups each use both cores already (and two Ray clusters at once wait on each
# other): they run one after another on one worker, beside the single-process tests on the other.
SERIAL_GROUP_PATHS = ("tests/runtime/", "tests/train/test_deepspeed_engine.py", "tests/train/test_fsdp_engine.py",
                      "tests/train/test_tp_engine.py")


def pytest_collection_modifyitems(config, items):
    # the long serial group first (a stable partition: module order kept), so it is not the run's lone tail
    items[:] = sorted(items, key=lambda item: not item.nodeid.startswith(SERIAL_GROUP_PATHS))


def pytest_xdist_make_scheduler(config, log):
    # xdist's own loadgroup reads group marks through a node attribute pytest 9 no longer uses: a scheduler of
    # our own puts every serial test in one scope (a scope runs on one worker, in order) and each other test
    # in a scope of its own
    from xdist.scheduler import LoadScopeScheduling

    class SerialGroupScheduling(LoadScopeScheduling):
        def _split_scope(self, nodeid: str) -> str:
            return "serial" if nodeid.startswith(SERIAL_GROUP_PATHS) else nodeid

    return SerialGroupScheduling(config, log)
