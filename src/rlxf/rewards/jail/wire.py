"""Plain data between the candidate's process and the checker's: length-prefixed JSON frames whose values
are tagged so that only builtin types come out of the decoder.

The checker never unpickles, never evaluates and never receives an object of the candidate's: a decoded
value is built from ``None``, ``bool``, ``int``, ``float``, ``complex``, ``str``, ``bytes``, ``list``,
``tuple``, ``dict``, ``set`` and ``frozenset`` only, so a comparison in a test runs the builtin ``==``.
Anything else the candidate returns stays in its process and is referred to by a handle number.

This module runs inside the sandbox too (the stdlib only; see ``jail/__init__.py``).
"""

import base64
import json
import struct

MAX_FRAME = 64 << 20  # bytes: a frame larger than this is a protocol error, not an allocation
_HEADER = struct.Struct(">I")


class ProtocolError(Exception):
    """The other side sent something that is not a well-formed frame or value."""


# ------------------------------------------------------------------------------------------- values

_SCALARS = (type(None), bool, int, float, str)


def encode(value, make_handle=None, depth=0):
    """A JSON-able tree for ``value``; objects that are not plain data become ``{"h": n}`` through
    ``make_handle`` (None: they are an error)."""
    if depth > 200:
        raise ValueError("value nested deeper than 200 levels")
    kind = type(value)
    if kind in _SCALARS:
        return value
    if kind is list:
        return {"l": [encode(v, make_handle, depth + 1) for v in value]}
    if kind is tuple:
        return {"t": [encode(v, make_handle, depth + 1) for v in value]}
    if kind is dict:
        return {"d": [[encode(k, make_handle, depth + 1), encode(v, make_handle, depth + 1)] for k, v in value.items()]}
    if kind is set:
        return {"s": [encode(v, make_handle, depth + 1) for v in value]}
    if kind is frozenset:
        return {"f": [encode(v, make_handle, depth + 1) for v in value]}
    if kind is bytes:
        return {"b": base64.b64encode(value).decode("ascii")}
    if kind is complex:
        return {"c": [value.real, value.imag]}
    if make_handle is None:
        raise TypeError(f"{kind.__name__} is not plain data")
    return {"h": make_handle(value)}


def decode(tree, handle=None, depth=0):
    """The builtin value for a tree made by ``encode``; ``handle(n)`` makes the stand-in for ``{"h": n}``
    (None: handles are a protocol error). Raises ProtocolError on anything else."""
    if depth > 200:
        raise ProtocolError("value nested deeper than 200 levels")
    kind = type(tree)
    if kind in _SCALARS:
        return tree
    if kind is not dict or len(tree) != 1:
        raise ProtocolError(f"not a tagged value: {type(tree).__name__}")
    ((tag, body),) = tree.items()
    try:
        if tag in ("l", "t", "s", "f"):
            if type(body) is not list:
                raise ProtocolError(f"tag {tag!r} needs a list")
            items = [decode(v, handle, depth + 1) for v in body]
            return {"l": list, "t": tuple, "s": set, "f": frozenset}[tag](items)
        if tag == "d":
            if type(body) is not list or any(type(p) is not list or len(p) != 2 for p in body):
                raise ProtocolError("tag 'd' needs a list of pairs")
            return {decode(k, handle, depth + 1): decode(v, handle, depth + 1) for k, v in body}
        if tag == "b" and type(body) is str:
            return base64.b64decode(body.encode("ascii"), validate=True)
        if tag == "c" and type(body) is list and len(body) == 2 and all(type(x) in (int, float) for x in body):
            return complex(body[0], body[1])
        if tag == "h" and type(body) is int and handle is not None:
            return handle(body)
    except ProtocolError:
        raise
    except (TypeError, ValueError) as err:  # unhashable keys, bad base64, ...
        raise ProtocolError(f"bad {tag!r} value: {err}") from None
    raise ProtocolError(f"unknown tag {tag!r}")


# ------------------------------------------------------------------------------------------- frames


def send(sock, message):
    data = json.dumps(message, separators=(",", ":")).encode("utf-8")
    if len(data) > MAX_FRAME:
        raise ValueError(f"frame of {len(data)} bytes is over {MAX_FRAME}")
    sock.sendall(_HEADER.pack(len(data)) + data)


def _read_exact(sock, n):
    chunks, left = [], n
    while left:
        chunk = sock.recv(min(left, 1 << 20))
        if not chunk:
            raise EOFError("the other side closed the channel")
        chunks.append(chunk)
        left -= len(chunk)
    return b"".join(chunks)


def receive(sock):
    """One frame as a JSON value; EOFError when the peer is gone, ProtocolError when it is not a frame."""
    (size,) = _HEADER.unpack(_read_exact(sock, _HEADER.size))
    if size > MAX_FRAME:
        raise ProtocolError(f"frame of {size} bytes announced (limit {MAX_FRAME})")
    try:
        return json.loads(_read_exact(sock, size).decode("utf-8"))
    except (UnicodeDecodeError, ValueError, RecursionError) as err:
        raise ProtocolError(f"frame is not JSON: {err}") from None
