"""DAPO dynamic sampling: only groups whose rewards differ are kept, prompts are drawn until the
batch is full, and the round cap holds (tops up with no-signal groups)."""

import torch

from rlxf.algos import AlgorithmConfig
from rlxf.batch import TrajectoryBatch
from rlxf.data.prompts import PromptStream
from rlxf.loops.dynamic_sampling import fill_batch, split_groups

N = 2  # responses per prompt


def scripted_sampler(rewards_by_prompt: dict[int, list[float]], calls: list):
    """A stand-in for rollout + reward: prompt row {"id": k} gets the scripted rewards of prompt k."""

    def sample(rows, first_group):
        calls.append(([r["id"] for r in rows], first_group))
        n_rows = len(rows) * N
        mask = torch.ones(n_rows, 1, dtype=torch.long)
        return TrajectoryBatch(
            prompt_ids=mask.clone(), prompt_mask=mask.clone(), response_ids=mask.clone(), response_mask=mask.clone(),
            loss_mask=mask.clone(), group_ids=torch.arange(len(rows)).repeat_interleave(N) + first_group,
            rewards=torch.tensor([x for r in rows for x in rewards_by_prompt[r["id"]]]),
            metadata=[{"id": r["id"]} for r in rows for _ in range(N)],
        )

    return sample


class ordered_stream(PromptStream):
    """Rows in order (no shuffle), so the scripted prompt ids are easy to read."""

    def __init__(self, n):
        super().__init__([{"id": k} for k in range(n)], seed=0)

    def take(self, count):
        self.position += count
        return self.rows[self.position - count: self.position]


SIGNAL, FLAT = [1.0, 0.0], [1.0, 1.0]


def test_keeps_only_groups_with_signal_and_draws_until_full():
    # prompts 0..3 in round 1 (two with signal), 4..7 in round 2 (two more): full after 2 rounds
    script = {0: SIGNAL, 1: FLAT, 2: [0.0, 0.0], 3: [0.5, 0.2], 4: FLAT, 5: SIGNAL, 6: SIGNAL, 7: SIGNAL}
    calls, metrics = [], {}
    algo = AlgorithmConfig(name="dapo", max_sampling_rounds=5)
    batch = fill_batch(scripted_sampler(script, calls), ordered_stream(8), 4, algo, pad_id=0, metrics=metrics)
    assert calls == [([0, 1, 2, 3], 0), ([4, 5, 6, 7], 4)]  # group ids stay unique across rounds
    assert [m["id"] for m in batch.metadata] == [0, 0, 3, 3, 5, 5, 6, 6]  # 7 is surplus
    assert batch.group_ids.tolist() == [0, 0, 3, 3, 5, 5, 6, 6]
    assert metrics == {"sampling/rounds": 2, "sampling/signal_fraction": 5 / 8, "sampling/topped_up_groups": 0}


def test_round_cap_tops_up_with_dropped_groups():
    script = {k: (SIGNAL if k == 2 else FLAT) for k in range(9)}
    calls, metrics = [], {}
    algo = AlgorithmConfig(name="dapo", max_sampling_rounds=2)
    batch = fill_batch(scripted_sampler(script, calls), ordered_stream(9), 3, algo, pad_id=0, metrics=metrics)
    assert len(calls) == 2  # the cap, although only one group had signal
    assert [m["id"] for m in batch.metadata[::N]] == [2, 0, 1]  # kept first, then dropped in draw order
    assert metrics == {"sampling/rounds": 2, "sampling/signal_fraction": 1 / 6, "sampling/topped_up_groups": 2}


def test_off_means_one_draw_of_everything():
    calls = []
    batch = fill_batch(scripted_sampler({0: FLAT, 1: FLAT}, calls), ordered_stream(2), 2,
                       AlgorithmConfig(name="grpo"), pad_id=0, metrics={})
    assert calls == [([0, 1], 0)] and len(batch) == 4


def test_split_groups():
    calls = []
    batch = scripted_sampler({0: FLAT, 1: SIGNAL}, calls)([{"id": 0}, {"id": 1}], 0)
    with_signal, without = split_groups(batch)
    assert [b.group_ids.tolist() for b in with_signal] == [[1, 1]]
    assert [b.group_ids.tolist() for b in without] == [[0, 0]]
