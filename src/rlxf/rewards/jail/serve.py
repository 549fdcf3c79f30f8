"""The candidate's side of a run, inside the sandbox: run the program as ``__main__``; then, when a
checker is attached, answer its calls with plain data (a function server).

Everything here runs in the candidate's own process, so the candidate can replace any of it: that is
allowed for. All it can send the checker is frames that ``wire.decode`` turns into builtin values, and it
never sees a test or an expected value.
"""

import sys
import types

from . import wire

# What a checker may do to a name or a handle. Comparisons, hashing and containment are deliberately
# absent: forwarding ``==`` or ``in`` would hand the expected value to the candidate.
_OPS = {
    "call": lambda obj, args, kwargs: obj(*args, **kwargs),
    "getattr": lambda obj, args, kwargs: getattr(obj, args[0]),
    "getitem": lambda obj, args, kwargs: obj[args[0]],
    "len": lambda obj, args, kwargs: len(obj),
    "bool": lambda obj, args, kwargs: bool(obj),
    "str": lambda obj, args, kwargs: str(obj),
    "repr": lambda obj, args, kwargs: repr(obj),
    "iter": lambda obj, args, kwargs: iter(obj),
    "get": lambda obj, args, kwargs: obj,
}
_STOP = object()


def _next(obj, args, kwargs):
    try:
        return next(obj)
    except StopIteration:
        return _STOP


_OPS["next"] = _next


def run_program(code, main):
    """Execute ``code`` as the ``__main__`` module; the exit status a plain ``python main.py`` would have."""
    try:
        exec(compile(code, "main.py", "exec"), main.__dict__)
    except SystemExit as e:
        if e.code is None:
            return 0
        if isinstance(e.code, int):
            return e.code & 0xFF
        print(e.code, file=sys.stderr)
        return 1
    except BaseException:  # noqa: BLE001 - the program's own error, reported as python would
        import traceback

        traceback.print_exc()
        return 1
    return 0


def describe(namespace):
    """The names a checker may ask for: functions and classes (``call``), modules (re-imported by the
    checker itself, never proxied) and plain values (sent as data)."""
    names = {}
    for name, value in list(namespace.items()):
        if name.startswith("__"):
            continue
        if isinstance(value, types.ModuleType):
            names[name] = ["module", value.__name__]
        elif callable(value):
            names[name] = ["callable"]
        else:
            names[name] = ["value"]  # fetched with "get" when a test uses it
    return names


def serve(chan, namespace):
    """Answer the checker until it closes the channel."""
    objects = {}

    def make_handle(obj):
        objects[len(objects) + 1] = obj
        return len(objects)

    wire.send(chan, {"names": describe(namespace)})
    while True:
        try:
            request = wire.receive(chan)
        except EOFError:
            return
        target = request.get("target")
        obj = objects.get(target) if isinstance(target, int) else namespace.get(target)
        try:
            args = wire.decode(request.get("args", {"l": []}), objects.__getitem__)
            kwargs = wire.decode(request.get("kwargs", {"d": []}), objects.__getitem__)
            if target not in objects and target not in namespace:
                raise NameError(f"name {target!r} is not defined")
            result = _OPS[request["op"]](obj, args, kwargs)
            reply = {"stop": True} if result is _STOP else {"ok": wire.encode(result, make_handle)}
        except BaseException as e:  # noqa: BLE001 - the candidate's exception goes back to the test
            reply = {"raise": [type(e).__name__, str(e)[:2000]]}
        wire.send(chan, reply)
