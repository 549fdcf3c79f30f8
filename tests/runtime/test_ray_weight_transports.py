"""Weight transports between Ray actors on one machine: the default recipe with its trainer and rollout
engine in two actors, synced over a gloo broadcast (and over shared memory), gives the in-process run's
numbers, and every sync is checksummed."""

from __future__ import annotations

import pytest

from tests.runtime.conftest import COMPARED, assert_same_run, run_recipe


@pytest.mark.parametrize("transport", ["collective", "shared_memory"])
def test_two_ray_actors_sync_over_the_transport(ray_cluster, tmp_path, sft_model_dir, embedded_rows, transport):
    rows = run_recipe(tmp_path, sft_model_dir, transport, "runtime.kind=ray", "runtime.placement=disaggregated",
                      f"runtime.weight_sync.transport={transport}", *COMPARED)
    assert_same_run(rows, embedded_rows)  # the weights each step generated with were the trainer's, exactly
    assert [r["weight_sync/version"] for r in rows[1:]] == [1.0, 2.0]


def test_two_fsdp2_ranks_send_gathered_buckets_to_one_engine(ray_cluster, tmp_path, tiny_model_dir, dp_reference):
    """Both ranks gather each bucket of their shards (an all-gather per bucket, never the whole model at
    once), rank 0 broadcasts it to the engine; checksummed, and the run is the single-process run."""
    from tests.runtime.dp_loop import assert_rows_match, run

    rows = run(tmp_path / "dp", tiny_model_dir, 2, "runtime.kind=ray", "train.backend=fsdp2", "train.world_size=2",
               "runtime.weight_sync.transport=collective", "runtime.weight_sync.checksum=true",
               "runtime.weight_sync.bucket_mb=0.25")
    assert [r.pop("weight_sync/checksum_ok") for r in rows[1:]] == [1.0, 1.0]
    assert rows[1]["weight_sync/buckets"] > 1 and rows[-1]["weight_sync/version"] == 2
    same = [{k: v for k, v in r.items() if k != "weight_sync/buckets"} for r in dp_reference[2][1]]
    assert_rows_match([{k: v for k, v in r.items() if k != "weight_sync/buckets"} for r in rows], same)
