"""The process runtime (``runtime.kind: process``): chosen roles each in a child process of this
machine, the others in this process; no Ray.

``runtime.process_roles`` (default ``[rollout]``) names the roles that get a process. Each is a
:class:`~rlxf.runtime.worker.RoleWorker` (the same worker a Ray actor runs) serving calls over a pipe,
and the loop gets a :class:`ProcessRoleProxy` that behaves like the role: generator arguments come
back advanced and batch fields filled in place (``runtime/wire.py``), so a run's numbers are the
embedded run's. Tensors in calls and results travel through shared memory (torch.multiprocessing);
the role's constructor arguments are pickled by value, so the child holds its own copy of the
weights and sees new ones only through ``load_weights``.

What it is for: generation in its own process overlaps training in this one (``loop: rl_async`` on
one machine) without the per-call cost of Ray.

A child that dies (killed, out of memory) is restarted like a Ray actor: roles whose only state is
their weights (rollout, reward, reference) get a fresh child built from the same constructor
arguments, the last weight load is replayed into it, and the failed call is re-issued with the same
arguments and generator states, so nothing is lost or duplicated; at most ``runtime.max_restarts``
times per role. Other roles, or one past its budget, end the run with an error naming the role.
"""

from __future__ import annotations

import logging
import pickle
import traceback

import torch.multiprocessing as mp

from rlxf.errors import RemoteTraceback, RlxfError
from rlxf.runtime import RUNTIMES
from rlxf.runtime.wire import RESTARTABLE, CallResult, ReplayLog, WireProxy

logger = logging.getLogger(__name__)


class RoleProcessError(RlxfError, RuntimeError):
    """A role's child process failed or died."""


class RoleProcessDied(RoleProcessError):
    """A role's child process is gone (killed, crashed): the role may be restarted."""


def _serve(conn, spec: bytes, threads: int) -> None:
    """Child side: build the RoleWorker, then answer ``(worker method, args)`` requests until None."""
    from rlxf.runtime.worker import RoleWorker

    try:
        worker = RoleWorker(pickle.loads(spec), threads)
        conn.send(("ok", None))
    except BaseException as err:
        conn.send(("error", _portable_error(err)))
        return
    while True:
        try:
            request = conn.recv()
        except EOFError:
            return
        if request is None:
            return
        method, args = request
        try:
            conn.send(("ok", getattr(worker, method)(*args)))
        except BaseException as err:
            conn.send(("error", _portable_error(err)))


def _portable_error(err: BaseException) -> tuple[bytes | None, str, str]:
    """(the pickled error when it survives a round trip, else None; ``Type: message``; its traceback)."""
    summary = f"{type(err).__name__}: {err}"
    try:
        pickled = pickle.dumps(err)
        pickle.loads(pickled)  # a class whose __init__ takes other arguments than its args does not come back
    except Exception:  # noqa: BLE001 - any failure to travel: the parent gets the summary instead
        pickled = None
    return pickled, summary, traceback.format_exc()


def _raise_child_error(name: str, what: str, error: tuple[bytes | None, str, str]) -> None:
    """The child's error raised here as the same class (so ``except RewardError`` works as in one process),
    the child's traceback chained as its cause; an error that cannot travel becomes a RoleProcessError."""
    pickled, summary, child_traceback = error
    try:
        err = pickle.loads(pickled) if pickled is not None else None
    except Exception:  # noqa: BLE001 - its class does not import here
        err = None
    if not isinstance(err, Exception):  # could not travel, or a KeyboardInterrupt/SystemExit of the child
        err = RoleProcessError(f"role {name} failed in {what}: {summary} (--debug shows the role's traceback)")
    raise err from RemoteTraceback(child_traceback)


class ProcessActor:
    """A RoleWorker in a spawned child process, called over a pipe one request at a time."""

    def __init__(self, name: str, factory, args: tuple, kwargs: dict, threads: int) -> None:
        self.name, self._threads = name, threads
        self._spec = pickle.dumps((factory, args, kwargs))  # kept: a restart builds the role again
        self._spawn()

    def _spawn(self) -> None:
        ctx = mp.get_context("spawn")
        self._conn, child = ctx.Pipe()
        self.process = ctx.Process(target=_serve, args=(child, self._spec, self._threads), name=f"rlxf-{self.name}",
                                   daemon=True)
        self.process.start()
        child.close()
        self._answer("start-up")

    def restart(self) -> None:
        """A fresh child with the role built from its constructor arguments (the old one is ended)."""
        self.close()
        self._spawn()

    def request(self, method: str, *args):
        self._conn.send((method, args))
        # a role's call travels as ("call", its method, ...): an error names the role's method
        role_call = method in ("call", "call_attached") and args and isinstance(args[0], str)
        return self._answer(args[0] if role_call else method)

    def _answer(self, what: str):
        try:
            # Poll rather than block: a child that dies early may never close its end of the pipe
            # (the parent's resource sharer can still hold a duplicate of it).
            while not self._conn.poll(0.5):
                if not self.process.is_alive():
                    raise EOFError
            status, value = self._conn.recv()
        except (EOFError, ConnectionError):
            raise RoleProcessDied(
                f"role {self.name}: its process (pid {self.process.pid}) died during {what} "
                f"(exit code {self.process.exitcode})"
            ) from None
        if status == "error":
            _raise_child_error(self.name, what, value)
        return value

    def close(self) -> None:
        if self.process.is_alive():
            try:
                self._conn.send(None)
            except (BrokenPipeError, OSError):
                pass
            self.process.join(timeout=10)
        if self.process.is_alive():
            self.process.terminate()
            self.process.join(timeout=10)
        self._conn.close()


class ProcessRoleProxy(WireProxy):
    """Calls the role (or what is attached beside it) in its process, like the role itself."""

    def __init__(self, actor: ProcessActor, remote_method: str = "call", max_restarts: int = 0) -> None:
        self._actor = actor
        self._remote_method = remote_method  # the RoleWorker method that runs a call
        self._max_restarts = max_restarts  # 0: not restarted
        self._replay = ReplayLog()
        self.restarts = 0

    def _transport(self, method: str, wire_args: tuple, wire_kwargs: dict) -> CallResult:
        while True:
            try:
                result = self._actor.request(self._remote_method, method, wire_args, wire_kwargs)
                break
            except RoleProcessDied as err:
                if not self.revive(err):
                    raise
                logger.warning("role %s died during %s; re-issued in a restarted process", self._actor.name, method)
        self._replay.record(method, wire_args, wire_kwargs)
        return result

    def revive(self, error: BaseException) -> bool:
        """After ``error``: restart the dead child and replay its last weight load; False when the
        error is not a death or the role is not (or no longer) restarted."""
        if not isinstance(error, RoleProcessDied) or self.restarts >= self._max_restarts:
            return False
        self.restarts += 1
        self._actor.restart()
        self._replay.replay(lambda method, args, kwargs: self._actor.request("call", method, args, kwargs))
        return True

    def attach(self, factory, *args, **kwargs) -> ProcessRoleProxy:
        """Build ``factory(role, *args)`` in the role's process; calls on the returned proxy go to it.
        Not restarted with the role: what is attached may hold state (the async producer's queue)."""
        self._actor.request("attach", factory, args, kwargs)
        return ProcessRoleProxy(self._actor, remote_method="call_attached")

    def attribute(self, name: str):
        return self._actor.request("attribute", name)

    def pid(self) -> int:
        return self._actor.request("pid")


@RUNTIMES.register("process")
class ProcessRuntime:
    def __init__(self, config) -> None:
        self.config = config
        self.actors: list[ProcessActor] = []

    def place(self, role: str, factory, *args, **kwargs):
        if role not in self.config.runtime.process_roles:
            return factory(*args, **kwargs)
        actor = ProcessActor(role, factory, args, kwargs, self.config.threads or 1)
        self.actors.append(actor)
        return ProcessRoleProxy(actor, max_restarts=self.config.runtime.max_restarts if role in RESTARTABLE else 0)

    def attach(self, role, factory, *args, **kwargs):
        if isinstance(role, ProcessRoleProxy):
            return role.attach(factory, *args, **kwargs)
        return factory(role, *args, **kwargs)

    def revive(self, role, error: BaseException) -> bool:
        """Whether ``role`` came back after ``error``: its dead child restarted (``ProcessRoleProxy.revive``)."""
        return isinstance(role, ProcessRoleProxy) and role.revive(error)

    def portable(self, role, config):
        """What stands for ``role`` in a child process: its config (pipes and pools do not pickle),
        from which the child builds its own."""
        return config

    def close(self) -> None:
        for actor in self.actors:
            actor.close()
        self.actors.clear()
