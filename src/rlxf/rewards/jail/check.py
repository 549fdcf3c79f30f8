"""The checker's side of a run, inside the sandbox, in a process of its own: it runs the tests and
decides pass or fail. The candidate is reached only through proxies that send plain data and get plain
data back (``wire``); its objects, its exceptions and its exit status cannot reach a decision here.

Test forms (the spec the parent writes to this process):

* ``{"kind": "assert", "code": "..."}``: Python run in a fresh namespace after ``setup``; it passes
  when it finishes without raising. HumanEval's ``check`` function plus ``check(entry_point)`` is one.
* ``{"kind": "call", "fn": name, "args": [...], "kwargs": {...}, "expected": value}``: passes when
  ``fn(*args, **kwargs) == expected`` (tuples compared as lists, since JSON has none).
"""

import builtins
import importlib
import json
import sys
import time

from . import wire


class CandidateGone(BaseException):
    """The candidate stopped answering (exited, hung past the deadline, sent garbage). A BaseException,
    so that a test's ``except Exception`` cannot swallow it and pass."""


class CandidateError(Exception):
    """An exception the candidate's code raised that is not one of the builtin ones mapped below."""


# Exceptions a candidate may raise *as themselves* (tests check for them). Never StopIteration,
# GeneratorExit or any BaseException: those would end a test's loop early and let it pass.
_MAPPED = {
    cls.__name__: cls
    for cls in (ValueError, TypeError, KeyError, IndexError, LookupError, ZeroDivisionError, ArithmeticError,
                OverflowError, RuntimeError, NotImplementedError, RecursionError, AttributeError,
                AssertionError, NameError, UnicodeError, MemoryError, OSError, EOFError)
}


class Client:
    def __init__(self, chan, deadline):
        self.chan = chan
        self.deadline = deadline
        self.names = {}
        self.gone = None

    def hello(self):
        try:
            self.names = self._receive()["names"]
        except (KeyError, TypeError) as err:
            self._fail(f"bad greeting: {err}")

    def _fail(self, why):
        self.gone = why
        raise CandidateGone(why)

    def _receive(self):
        left = self.deadline - time.monotonic()
        if left <= 0:
            self._fail("wall-clock limit reached")
        self.chan.settimeout(left)
        try:
            message = wire.receive(self.chan)
        except TimeoutError:
            self._fail("no answer before the wall-clock limit")
        except (EOFError, OSError) as err:
            self._fail(f"the candidate's process ended ({err})")
        except wire.ProtocolError as err:
            self._fail(f"protocol error: {err}")
        if type(message) is not dict:
            self._fail("protocol error: a reply is not an object")
        return message

    def request(self, op, target, args=(), kwargs=None):
        if self.gone is not None:
            raise CandidateGone(self.gone)
        try:
            frame = {"op": op, "target": target, "args": wire.encode(list(args), _handle_ref),
                     "kwargs": wire.encode(dict(kwargs or {}), _handle_ref)}
        except (TypeError, ValueError) as err:
            raise TypeError(f"cannot pass this argument to the candidate: {err}") from None
        try:
            wire.send(self.chan, frame)
        except OSError as err:
            self._fail(f"the candidate's process ended ({err})")
        reply = self._receive()
        if "ok" in reply:
            try:
                return wire.decode(reply["ok"], lambda ref: Remote(self, ref))
            except wire.ProtocolError as err:
                self._fail(f"protocol error: {err}")
        if reply.get("stop") is True and op == "next":  # elsewhere a StopIteration could end a test's loop
            raise StopIteration
        if "raise" in reply and type(reply["raise"]) is list and len(reply["raise"]) == 2:
            name, message = (str(x) for x in reply["raise"])
            raise _MAPPED.get(name, CandidateError)(f"{message}" if name in _MAPPED else f"{name}: {message}")
        self._fail("protocol error: unknown reply")


def _handle_ref(value):
    if isinstance(value, Remote) and isinstance(value._target, int):
        return value._target
    raise TypeError(f"{type(value).__name__} is not plain data")


class Remote:
    """Stands for a function or object of the candidate's. Equality, hashing and ``in`` stay the
    checker's own (identity): forwarding them would show the candidate the expected value."""

    __slots__ = ("_client", "_target")
    __eq__ = object.__eq__
    __ne__ = object.__ne__
    __hash__ = object.__hash__

    def __init__(self, client, target):
        object.__setattr__(self, "_client", client)
        object.__setattr__(self, "_target", target)

    def __call__(self, *args, **kwargs):
        return self._client.request("call", self._target, args, kwargs)

    def __getattr__(self, name):
        if name.startswith("__"):
            raise AttributeError(name)
        return self._client.request("getattr", self._target, (name,))

    def __getitem__(self, key):
        return self._client.request("getitem", self._target, (key,))

    def __len__(self):
        return self._client.request("len", self._target)

    def __bool__(self):
        return self._client.request("bool", self._target)

    def __str__(self):
        return self._client.request("str", self._target)

    def __repr__(self):
        return self._client.request("repr", self._target)

    def __iter__(self):
        return self._client.request("iter", self._target)

    def __next__(self):
        return self._client.request("next", self._target)


def _names_used(code):
    used, todo = set(), [code]
    while todo:
        c = todo.pop()
        used.update(c.co_names)
        todo.extend(k for k in c.co_consts if hasattr(k, "co_names"))
    return used


def _bind_candidate(client, env, wanted, named_by_test_data):
    """Put the candidate's names that a test uses into its namespace. Names inferred from the test's code
    never shadow a builtin (else a candidate could define ``abs`` or ``len`` for the test)."""
    for name in wanted:
        info = client.names.get(name)
        if not isinstance(info, list) or not info or (hasattr(builtins, name) and not named_by_test_data):
            continue
        if info[0] == "callable":
            env[name] = Remote(client, name)
        elif info[0] == "value":
            env[name] = client.request("get", name)
        elif info[0] == "module" and len(info) == 2 and isinstance(info[1], str):
            try:
                env[name] = importlib.import_module(info[1])  # the checker's own copy, never the candidate's
            except Exception:  # noqa: BLE001
                pass


def _as_lists(value):
    if isinstance(value, (list, tuple)):
        return [_as_lists(v) for v in value]
    if isinstance(value, dict):
        return {k: _as_lists(v) for k, v in value.items()}
    return value


def run_test(client, spec, test):
    env = {"__name__": "__main__", "__builtins__": builtins}
    if test.get("kind") == "call":
        fn = test["fn"]
        _bind_candidate(client, env, [fn], True)
        if fn not in env:
            raise NameError(f"the program defines no function {fn!r}")
        result = env[fn](*test.get("args", []), **test.get("kwargs", {}))
        if isinstance(result, Remote) or _as_lists(result) != _as_lists(test.get("expected")):
            raise AssertionError("wrong result")
        return
    code = compile(test["code"], "<test>", "exec")
    setup = spec.get("setup") or ""
    if setup:
        exec(compile(setup, "<setup>", "exec"), env)
    entry_points = spec.get("entry_points")
    wanted = entry_points if entry_points else [n for n in _names_used(code) if n not in env]
    _bind_candidate(client, env, wanted, bool(entry_points))
    exec(code, env)


def main(chan, spec, report_fd, deadline):
    client = Client(chan, deadline)
    results = []
    try:
        client.hello()
    except CandidateGone:
        pass
    for test in spec["tests"]:
        if client.gone is not None:
            results.append([False, f"candidate: {client.gone}"])
            continue
        try:
            run_test(client, spec, test)
            results.append([True, None])
        except BaseException as e:  # noqa: BLE001 - every way a test can end that is not success
            results.append([False, f"{type(e).__name__}: {e}"[:500]])
    with open(report_fd, "wb", closefd=True) as out:
        out.write(json.dumps({"results": results}).encode("utf-8"))
    sys.stdout.flush()
