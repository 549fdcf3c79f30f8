"""runtime/heap.py: freed heap goes back to the OS after every RL stage, and nowhere but glibc is it tried."""

import json
import platform

import rlxf.loops.rl as rl_loop
from rlxf.checked_config import load_config
from rlxf.loops.rl import StageTimer, train_rl
from rlxf.runtime import heap
from tests.conftest import small_overrides


def test_release_returns_freed_pages_on_glibc(monkeypatch):
    if platform.system() != "Linux" or platform.libc_ver()[0] != "glibc":
        return  # the no-op case is the next test
    # 32 MiB in 32 KiB blocks (below the mmap threshold: on the heap), pinned by a block above them,
    # so free() cannot shrink the heap's top itself: only malloc_trim gives these pages back
    blocks = [bytearray(32 * 1024) for _ in range(1024)]
    pin = bytearray(32 * 1024)
    del blocks
    assert heap.release_freed_memory() is True
    del pin


def test_release_is_a_no_op_without_glibc(monkeypatch):
    heap._glibc_malloc_trim.cache_clear()
    monkeypatch.setattr(platform, "libc_ver", lambda *_: ("musl", "1.2"))
    try:
        assert heap._glibc_malloc_trim() is None
        assert heap.release_freed_memory() is False
    finally:
        heap._glibc_malloc_trim.cache_clear()
    heap._glibc_malloc_trim.cache_clear()
    monkeypatch.setattr(platform, "system", lambda: "Darwin")
    try:
        assert heap.release_freed_memory() is False
    finally:
        heap._glibc_malloc_trim.cache_clear()


def test_each_timed_stage_ends_with_one_release(monkeypatch):
    calls = []
    monkeypatch.setattr(rl_loop, "release_freed_memory", lambda: calls.append(1))
    timer = StageTimer()
    for stage in ("generation", "train", "generation", "weight_sync"):
        with timer(stage):
            pass
    assert len(calls) == 4 and sorted(timer.seconds) == ["time/generation", "time/train", "time/weight_sync"]
    with StageTimer(trim=False)("generation"):  # runtime.trim_memory: false
        pass
    assert len(calls) == 4


def test_rl_loop_releases_after_every_stage_of_every_step(monkeypatch, tmp_path, tiny_model_dir):
    calls = []
    monkeypatch.setattr(rl_loop, "release_freed_memory", lambda: calls.append(1))
    run_dir = tmp_path / "run"
    train_rl(load_config(None, small_overrides(run_dir, tiny_model_dir, steps=2)), write=lambda _: None)
    rows = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    # GRPO without dynamic sampling enters each stage once a step: one release per time/<stage> key
    # (time/step is the whole step; time/weight_sync_seconds is the sync's own report, not a stage)
    stages = [[k for k in row if k.startswith("time/") and k not in ("time/step", "time/weight_sync_seconds")]
              for row in rows if row["step"] > 0]
    assert [len(s) for s in stages] == [7, 8]  # step 2 adds the held-out evaluation
    assert {"time/generation", "time/train", "time/weight_sync", "time/checkpoint"} <= set(stages[0])
    assert "time/eval" in stages[1] and len(calls) == 15
    calls.clear()
    train_rl(load_config(None, [*small_overrides(tmp_path / "off", tiny_model_dir, steps=1), "runtime.trim_memory=false"]),
             write=lambda _: None)
    assert calls == []
