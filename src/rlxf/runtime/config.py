"""The ``runtime`` section of the config tree: where the roles live and how weights reach the engines.

* ``kind``        ``embedded`` (the default: every role in this process, no Ray), ``process`` (the
  roles in ``process_roles`` each in a child process of this machine, no Ray) or ``ray`` (each role a
  Ray actor on a placement group); see ``rlxf.runtime.RUNTIMES``.
* ``address``     ``ray`` only: an existing cluster (``auto``, ``ray://host:10001``, ``host:6379``);
  unset starts a local cluster for the run and stops it at the end.
* ``placement``   which roles share resources: ``colocated`` (all roles in one bundle, time-sharing its
  devices), ``disaggregated`` (one bundle per role), or a mapping role -> group name (roles with the
  same group share a bundle), e.g. ``{rollout: gen, reward: gen, actor: train, reference: train}``.
* ``cpus_per_role`` / ``gpus_per_role``  what each role actor asks of its bundle.
* ``weight_sync`` trainer -> rollout engine: bucket size, an optional checksum check, and the transport
  (``object_store``, ``shared_memory``, ``collective``: ``rlxf.runtime.transports``).
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator

ROLE_NAMES = ("rollout", "reward", "reference", "teacher", "actor", "critic")


class _Section(BaseModel):
    model_config = ConfigDict(extra="forbid", validate_assignment=True)


class WeightSyncConfig(_Section):
    """Trainer -> rollout engine weight updates."""

    bucket_mb: float = Field(64.0, gt=0, description="tensors are flattened into buckets of at most this size")
    checksum: bool = Field(False, description="compare per-tensor digests of the engine's weights with the trainer's")
    transport: str = Field("object_store", description="object_store | shared_memory (one machine) | collective "
                           "(gloo / NCCL)")
    timeout_s: float = Field(600.0, gt=0, description="collective: how long a member waits for the others")
    mode: str = Field("full", description="full (every weight) | delta (the tensors changed since the engine's "
                      "version; under LoRA: adapter) | adapter (LoRA: the adapter alone, merged by the engine)")

    @field_validator("mode")
    @classmethod
    def _known_mode(cls, name: str) -> str:
        from rlxf.runtime.sync_modes import WEIGHT_SYNC_MODES

        if name not in WEIGHT_SYNC_MODES.names():
            raise ValueError(f"unknown weight_sync mode {name!r}; known: {', '.join(WEIGHT_SYNC_MODES.names())}")
        return name

    @field_validator("transport")
    @classmethod
    def _known_transport(cls, name: str) -> str:
        from rlxf.runtime.transports import WEIGHT_TRANSPORTS

        if name not in WEIGHT_TRANSPORTS.names():
            raise ValueError(f"unknown weight_sync transport {name!r}; known: {', '.join(WEIGHT_TRANSPORTS.names())}")
        return name


class RuntimeConfig(_Section):
    kind: str = Field("embedded", description="embedded (every role in this process) | process (roles in child "
                      "processes, no Ray) | ray (Ray actors)")
    process_roles: list[str] = Field(default_factory=lambda: ["rollout"], description="kind process: the roles "
                                     "that get a process of their own")
    address: str | None = Field(None, description="ray: an existing cluster (auto, ray://host:10001, host:6379); "
                                "null = start a local one for the run")
    placement: Literal["colocated", "disaggregated"] | dict[str, str] = Field(
        "colocated", description="colocated (one bundle for all roles) | disaggregated (one per role) | "
        "{role: group} (roles of a group share a bundle)")
    strategy: Literal["PACK", "SPREAD", "STRICT_PACK", "STRICT_SPREAD"] | None = Field(
        None, description="Ray placement-group strategy; null = from placement")
    cpus_per_role: float = Field(0.25, gt=0, description="CPUs each role actor asks of its bundle")
    gpus_per_role: float = Field(0.0, ge=0, description="GPUs each role actor asks of its bundle")
    max_restarts: int = Field(3, ge=0, description="stateless roles (rollout, reward, reference, "
                              "teacher) restart this often")
    trim_memory: bool = Field(True, description="give freed heap back to the OS after each loop stage (glibc "
                              "malloc_trim; 11-20 MiB less peak RSS on the default recipe, a few % more CPU in page faults; no-op off glibc)")
    weight_sync: WeightSyncConfig = Field(default_factory=WeightSyncConfig, description=WeightSyncConfig.__doc__)

    @field_validator("process_roles")
    @classmethod
    def _known_roles(cls, roles: list[str]) -> list[str]:
        unknown = sorted(set(roles) - set(ROLE_NAMES))
        if unknown:
            raise ValueError(f"unknown roles {unknown}; roles: {list(ROLE_NAMES)}")
        return roles

    def groups(self) -> dict[str, str]:
        """role -> placement group name."""
        if self.placement == "colocated":
            return {role: "all" for role in ROLE_NAMES}
        if self.placement == "disaggregated":
            return {role: role for role in ROLE_NAMES}
        unknown = set(self.placement) - set(ROLE_NAMES)
        if unknown:
            raise ValueError(f"runtime.placement names unknown roles {sorted(unknown)}; roles: {list(ROLE_NAMES)}")
        return {role: self.placement.get(role, role) for role in ROLE_NAMES}
