"""Whether ``model.device`` names a device this build of torch has (checked when a recipe loads, so a
run on a device it lacks is one line at start-up, not an assertion deep inside the first ``.to``)."""

from __future__ import annotations

import torch


def device_problem(name: str) -> str | None:
    """What is wrong with ``model.device=name`` on this machine, or None (``auto`` always runs)."""
    if name == "auto":
        return None
    try:
        device = torch.device(name)
    except (RuntimeError, ValueError):
        return f"model.device={name!r} is not a device name (auto, cpu, cuda, cuda:N, mps, ...)"
    if device.type == "cpu":
        return None
    backend = getattr(torch, device.type, None)
    is_available = getattr(backend, "is_available", None)
    if not callable(is_available) or not is_available():
        return (f"model.device={name}: this torch ({torch.__version__}) has no {device.type} device here; "
                "use model.device=auto or cpu")
    count = backend.device_count() if hasattr(backend, "device_count") else 1
    if device.index is not None and device.index >= count:
        return f"model.device={name}: this machine has {count} {device.type} device(s), numbered from 0"
    return None
