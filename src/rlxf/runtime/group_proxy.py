"""A data-parallel trainer role as N Ray actors (ranks) behind one proxy the loop calls like the role.

Each method has a plan (``CALLS``; anything else is broadcast):

* ``by_rows`` (``compute_log_probs``, ``compute_values``): the batch's rows are split over the ranks
  (``runtime/dp_split.py``), every rank computes its rows, the results are put back in row order;
* ``broadcast``: every rank gets the same arguments (``update`` gets the whole batch and the shuffle
  generator's state, so all ranks draw the same global mini-batches and each trains on its slice —
  train/data_parallel.py); collective calls (weights, checkpoints) need every rank anyway. Rank 0's
  result and in-place effects (the generator's new state) are the call's.

Update metrics: one dict per optimizer step; ``loss``, ``grad_norm`` and ``lr`` are already global
(the engine reduces them), other metrics (micro-batch means) are averaged over ranks. The ranks are
trainer state and are not restarted: a rank that fails kills the group (the others would wait in a
collective forever) and the run resumes from its last checkpoint.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import ray

from rlxf.batch import TrajectoryBatch
from rlxf.runtime import ray_errors
from rlxf.runtime.dp_split import merge_step_metrics, shard_rows
from rlxf.runtime.rank_worker import RankWorker
from rlxf.runtime.wire import CallResult, RemoteValue, apply_result, deferred_wire, to_wire


def first(values: list):
    return values[0]


@dataclass(frozen=True)
class Broadcast:
    merge: Callable[[list], object] = first

    def __call__(self, group: RoleGroupProxy, method: str, *args, **kwargs):
        wire_args, wire_kwargs, generators = to_wire(args, kwargs)
        shared_args, shared_kwargs = ray.put(wire_args), ray.put(wire_kwargs)  # one copy for all ranks
        results: list[CallResult] = group._gather([w.call.remote(method, shared_args, shared_kwargs) for w in group._workers])
        value = self.merge([r.value for r in results])
        return apply_result(CallResult(value, results[0].generator_states, results[0].batch_updates), args, kwargs,
                            generators)


@dataclass(frozen=True)
class ByRows:
    def __call__(self, group: RoleGroupProxy, method: str, batch: TrajectoryBatch, *args, **kwargs):
        shards = shard_rows(batch.group_ids, len(group._workers))
        refs = [w.call.remote(method, (batch.select(rows), *args), kwargs) for w, rows in zip(group._workers, shards.padded)]
        return shards.merge([r.value for r in group._gather(refs)])


CALLS = {
    "compute_log_probs": ByRows(),
    "compute_values": ByRows(),
    "update": Broadcast(merge=merge_step_metrics),
}
DEFAULT_CALL = Broadcast()


class RoleGroupProxy:
    def __init__(self, name: str, workers: list, keep_alive=None) -> None:
        self._name = name
        self._workers = workers
        self._keep_alive = keep_alive  # the ranks' constructor arguments (see RoleProxy)

    @classmethod
    def start(cls, name: str, spec, world_size: int, threads: int, options: dict) -> RoleGroupProxy:
        """N rank actors: rank 0 picks the rendezvous address, all join the group, then build the role."""
        workers = [ray.remote(RankWorker).options(**options).remote(threads) for _ in range(world_size)]
        group = cls(name, workers, keep_alive=spec)
        host, port = ray_errors.get(workers[0].rendezvous_address.remote())
        group._gather([w.join.remote(host, port, rank, world_size) for rank, w in enumerate(workers)])
        group._gather([w.build.remote(spec) for w in workers])
        return group

    def __getattr__(self, method: str):
        if method.startswith("_"):
            raise AttributeError(method)
        plan = CALLS.get(method, DEFAULT_CALL)
        return lambda *args, **kwargs: plan(self, method, *args, **kwargs)

    def _gather(self, refs: list) -> list:
        """Every rank's result; the first failure kills the group at once (the others may be blocked in a
        collective waiting for the failed rank)."""
        pending = list(refs)
        try:
            while pending:
                done, pending = ray.wait(pending, num_returns=1)
                ray_errors.get(done[0])
        except Exception:
            self.kill()
            raise
        return ray_errors.get(refs)

    def defer(self, method: str, *args, **kwargs) -> RemoteValue:
        """``RoleProxy.defer`` for a collective call (``export_weights``): every rank takes part, and
        rank 0's value stays in the object store for another actor to fetch (not via the driver)."""
        wire_args, wire_kwargs = deferred_wire(f"{self._name}.{method}", args, kwargs)
        stored = self._gather([w.call_stored.remote(method, wire_args, wire_kwargs) for w in self._workers])
        return RemoteValue(stored[0][0])  # rank 0's gathered weights, put in the store by rank 0

    def attribute(self, name: str):
        return ray_errors.get(self._workers[0].attribute.remote(name))

    def kill(self) -> None:
        for worker in self._workers:
            ray.kill(worker, no_restart=True)
