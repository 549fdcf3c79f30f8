"""What crosses the process boundary of a role call, so a remote call behaves like a local one.

Role methods may advance a ``torch.Generator`` argument or fill fields of a ``TrajectoryBatch``
argument in place (``RewardRole.score_batch``). A remote call gets copies, so the worker sends back the
generators' new states and the batch fields it reassigned, and the caller applies them: the loop sees
exactly what it would see in-process (a run on Ray reproduces the embedded run's numbers).
"""

from __future__ import annotations

import copy
from dataclasses import dataclass, fields
from functools import partial

import torch

from rlxf.batch import TrajectoryBatch


@dataclass
class GeneratorState:
    device: str
    state: torch.Tensor

    @classmethod
    def of(cls, generator: torch.Generator) -> GeneratorState:
        return cls(str(generator.device), generator.get_state())

    def build(self) -> torch.Generator:
        generator = torch.Generator(device=self.device)
        generator.set_state(self.state)
        return generator


def deferred_wire(where: str, args: tuple, kwargs: dict) -> tuple[tuple, dict]:
    """``to_wire`` for a deferred call (``defer``), whose in-place effects could never come back."""
    wire_args, wire_kwargs, generators = to_wire(args, kwargs)
    if generators:
        raise ValueError(f"{where}: a deferred call cannot take a torch.Generator")
    return wire_args, wire_kwargs


def to_wire(args: tuple, kwargs: dict) -> tuple[tuple, dict, list[torch.Generator]]:
    """Generators -> their states; returns the generators in order so their new states can be applied."""
    generators: list[torch.Generator] = []

    def convert(value):
        if isinstance(value, torch.Generator):
            generators.append(value)
            return GeneratorState.of(value)
        return value

    return tuple(convert(a) for a in args), {k: convert(v) for k, v in kwargs.items()}, generators


@dataclass
class RemoteValue:
    """The result of another actor's call, still in Ray's object store (``RoleProxy.defer``). Passed as
    an argument, the worker fetches it itself: large values (weights) go actor to actor, not through
    the driver."""

    ref: object  # ray.ObjectRef

    def fetch(self):
        import ray

        return ray.get(self.ref)


@dataclass
class CallResult:
    value: object
    generator_states: list[torch.Tensor]
    batch_updates: list[dict]  # per TrajectoryBatch argument (in order): field -> new value


def run_call(method, args: tuple, kwargs: dict) -> CallResult:
    """Worker side: rebuild generators, call, report generator states and reassigned batch fields."""
    generators: list[torch.Generator] = []
    batches: list[tuple[TrajectoryBatch, dict, list]] = []

    def convert(value):
        if isinstance(value, RemoteValue):
            return value.fetch()
        if isinstance(value, GeneratorState):
            generators.append(value.build())
            return generators[-1]
        if isinstance(value, TrajectoryBatch):
            ids = {f.name: id(getattr(value, f.name)) for f in fields(value)}
            batches.append((value, ids, copy.deepcopy(value.metadata)))
        return value

    args = tuple(convert(a) for a in args)
    kwargs = {k: convert(v) for k, v in kwargs.items()}
    value = method(*args, **kwargs)
    updates = []
    for batch, ids, metadata in batches:
        changed = {f.name: getattr(batch, f.name) for f in fields(batch) if id(getattr(batch, f.name)) != ids[f.name]}
        if "metadata" not in changed and batch.metadata != metadata:
            changed["metadata"] = batch.metadata
        updates.append(changed)
    return CallResult(value, [g.get_state() for g in generators], updates)


def apply_result(result: CallResult, args: tuple, kwargs: dict, generators: list[torch.Generator]):
    """Caller side: advance the caller's generators and batches as the call did remotely."""
    for generator, state in zip(generators, result.generator_states):
        generator.set_state(state)
    batches = [v for v in (*args, *kwargs.values()) if isinstance(v, TrajectoryBatch)]
    for batch, changed in zip(batches, result.batch_updates):
        for name, value in changed.items():
            setattr(batch, name, value)
    return result.value


# Roles whose only state is their weights: a runtime restarts them when their process dies.
RESTARTABLE = frozenset({"rollout", "reward", "reference", "teacher"})
# Calls that set a role's state; the last one is replayed into a restarted role (by slot).
REPLAYED = {"update_weights": "weights", "load_weights": "weights", "receive_weights": "weights"}


class ReplayLog:
    """The last state-setting call of each slot (``REPLAYED``), to replay into a restarted role."""

    def __init__(self) -> None:
        self.calls: dict[str, tuple[str, tuple, dict]] = {}

    def record(self, method: str, wire_args: tuple, wire_kwargs: dict) -> None:
        if method in REPLAYED:
            self.calls[REPLAYED[method]] = (method, wire_args, wire_kwargs)

    def replay(self, send) -> None:
        """``send(method, wire_args, wire_kwargs)`` for every recorded call."""
        for method, args, kwargs in self.calls.values():
            send(method, args, kwargs)


class WireProxy:
    """A role in another process, called like the role itself: ``proxy.method(*args)`` sends the call
    (``_transport``, by the subclass: Ray, a pipe) and applies its in-place effects here."""

    def __getattr__(self, method: str):
        if method.startswith("_"):
            raise AttributeError(method)
        return partial(self._call, method)

    def _call(self, method: str, *args, **kwargs):
        wire_args, wire_kwargs, generators = to_wire(args, kwargs)
        return apply_result(self._transport(method, wire_args, wire_kwargs), args, kwargs, generators)

    def _transport(self, method: str, wire_args: tuple, wire_kwargs: dict) -> CallResult:
        raise NotImplementedError
