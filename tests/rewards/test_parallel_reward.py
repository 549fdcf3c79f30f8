"""Parallel scoring: chunking, order, determinism across worker counts, bounded in-flight requests."""

import os
import threading
import time

import pytest

from rlxf.rewards.base import RewardOutput, as_reward
from rlxf.rewards.parallel import ParallelReward, chunk_bounds, concatenate
from rlxf.rewards.registry import build_reward

# Answers chosen so both the fallback matcher and math-verify decide: 1/2 == 0.5 only by number,
# \frac{1}{2} == 1/2 only with math-verify.
CASES = [("\\boxed{0.5}", "1/2", 1.0), ("\\boxed{\\frac{1}{2}}", "1/2", 1.0), ("the answer is 7", "8", 0.0),
         ("<answer>12</answer>", "12", 1.0), ("no number", "3", 0.0)]


def _rows(n: int):
    cases = [CASES[i % len(CASES)] for i in range(n)]
    return [""] * n, [c[0] for c in cases], [{"answer": c[1]} for c in cases], [c[2] for c in cases]


def test_chunk_bounds_cover_the_batch_in_order():
    assert chunk_bounds(10, 3, None) == [(0, 4), (4, 8), (8, 10)]
    assert chunk_bounds(10, 3, 6) == [(0, 6), (6, 10)]
    assert chunk_bounds(2, 8, None) == [(0, 1), (1, 2)]
    assert chunk_bounds(0, 2, None) == []


def test_concatenate_keeps_order_and_refuses_mismatched_components():
    out = concatenate([RewardOutput([1.0], {"c": [0.0]}), RewardOutput([2.0, 3.0], {"c": [1.0, 1.0]})])
    assert out.scores == [1.0, 2.0, 3.0] and out.components == {"c": [0.0, 1.0, 1.0]}
    with pytest.raises(ValueError, match="different components"):
        concatenate([RewardOutput([1.0], {"c": [0.0]}), RewardOutput([2.0], {})])


def test_process_pool_scores_equal_the_plain_reward_for_any_worker_count():
    pytest.importorskip("math_verify")
    prompts, responses, metadata, expected = _rows(23)
    plain = build_reward("math").score(prompts, responses, metadata)
    assert plain.scores == expected
    spec = {"function": "math"}
    results = []
    for workers, chunk in [(1, None), (2, None), (2, 5), (3, 1)]:
        reward = ParallelReward(spec, workers=workers, chunk_size=chunk)
        try:
            results.append(reward.score(prompts, responses, metadata))
        finally:
            reward.close()
    for out in results:
        assert out.scores == expected
        assert out.components == plain.components


def test_thread_executor_bounds_requests_in_flight():
    state = {"now": 0, "peak": 0, "calls": 0}
    lock, full = threading.Lock(), threading.Event()

    def slow(prompts, responses, metadata):
        with lock:
            state["now"] += 1
            state["calls"] += 1
            state["peak"] = max(state["peak"], state["now"])
            if state["now"] == 3:
                full.set()
        full.wait(10)  # the first calls wait for each other: the peak does not depend on the machine's load
        time.sleep(0.05)
        with lock:
            state["now"] -= 1
        return [float(len(r)) for r in responses]

    reward = ParallelReward({"function": "arithmetic"}, workers=3, executor="thread", chunk_size=2)
    reward.local = as_reward(slow)  # the threads share the locally built reward: swap in a slow one
    try:
        out = reward.score(["p"] * 13, ["x" * i for i in range(13)], [{}] * 13)
    finally:
        reward.close()
    assert out.scores == [float(i) for i in range(13)]
    assert state["calls"] == 7 and state["peak"] == 3


def test_bad_specs_are_named():
    with pytest.raises(ValueError, match="normalises over the batch"):
        ParallelReward({"function": "mix", "kwargs": {"rewards": [{"function": "arithmetic"}], "normalize": "zscore"}})
    with pytest.raises(ValueError, match=r"`reward` must be \{function"):
        ParallelReward({"name": "math"})
    with pytest.raises(ValueError, match="executor must be"):
        ParallelReward({"function": "math"}, executor="gpu")


def dying(prompts, responses, metadata):
    os._exit(3)  # a worker killed mid-batch (out of memory, a segfault in a C extension, ...)


def test_a_dead_worker_is_named_and_the_next_batch_gets_a_fresh_pool():
    reward = ParallelReward({"function": "tests.rewards.test_parallel_reward:dying"}, workers=2)
    try:
        with pytest.raises(RuntimeError, match=r"parallel: a worker process died\. .*if __name__ == \"__main__\""):
            reward.score(["p"] * 4, ["r"] * 4, [{}] * 4)
        assert reward._pool is None
    finally:
        reward.close()
