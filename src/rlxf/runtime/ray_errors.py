"""``ray.get`` that hands an actor's rlxf error to the driver as itself.

Ray raises an actor's exception as a ``RayTaskError`` subclass of the original class whose message is the
remote traceback; the driver's ``except RewardError`` still works, but the user would read a traceback.
An :class:`~rlxf.errors.RlxfError` is raised again as the original error (its one-line message), the remote
traceback chained as its cause (``--debug`` shows it); any other error is left as Ray raised it."""

from __future__ import annotations

import ray
from ray.exceptions import RayTaskError

from rlxf.errors import RemoteTraceback, RlxfError


def get(refs, **kwargs):
    try:
        return ray.get(refs, **kwargs)
    except RayTaskError as err:
        cause = getattr(err, "cause", None)
        if isinstance(cause, RlxfError):
            raise cause from RemoteTraceback(str(err))
        raise
