"""Checkpoints as safetensors + JSON (no pickled model state), written atomically.

Layout of ``RUN_DIR/checkpoints/step_000042/``:

* ``policy/``                — ``save_pretrained`` output: loads with ``AutoModelForCausalLM``;
* ``<engine>.optimizer.safetensors`` + ``<engine>.optimizer.json`` — optimizer and LR-schedule state;
* ``<name>.safetensors``      — other module weights (the critic);
* ``state.json``              — the loop's state: step, data position, RNG states, KL controller.

A checkpoint is written to ``step_N.tmp`` and renamed into place, so a run killed mid-save leaves
the previous checkpoint intact.
"""

from __future__ import annotations

import base64
import json
import os
import shutil
from pathlib import Path

import torch
from safetensors.torch import load_file, save_file

CHECKPOINTS = "checkpoints"


def checkpoint_dir(run_dir: str | Path, step: int) -> Path:
    return Path(run_dir) / CHECKPOINTS / f"step_{step:06d}"


def latest_checkpoint(run_dir: str | Path) -> Path | None:
    root = Path(run_dir) / CHECKPOINTS
    done = sorted(p for p in root.glob("step_*") if p.is_dir() and not p.name.endswith(".tmp"))
    return done[-1] if done else None


def save_optimizer(optimizer: torch.optim.Optimizer, scheduler, out_dir: Path, name: str) -> None:
    save_optimizer_state(optimizer.state_dict(), scheduler, out_dir, name)


def save_optimizer_state(state: dict, scheduler, out_dir: Path, name: str) -> None:
    """An optimizer state dict keyed by parameter index (every train engine writes this format)."""
    tensors = {
        f"{index}.{key}": torch.as_tensor(value).contiguous()
        for index, slots in state["state"].items()
        for key, value in slots.items()
    }
    save_file(tensors, str(Path(out_dir) / f"{name}.optimizer.safetensors"))
    meta = {"param_groups": state["param_groups"], "scheduler": scheduler.state_dict()}
    (Path(out_dir) / f"{name}.optimizer.json").write_text(json.dumps(meta))


# How the optimizer runs is the loading engine's choice, not the checkpoint's: a single-process
# checkpoint (fused kernel) resumes in a sharded engine (foreach kernel), and the other way round.
KERNEL_OPTIONS = ("foreach", "fused", "capturable", "differentiable")


def read_optimizer_state(in_dir: Path, name: str, optimizer: torch.optim.Optimizer) -> tuple[dict, dict]:
    """(optimizer state dict keyed by parameter index, scheduler state); the param groups keep
    ``optimizer``'s kernel options."""
    tensors = load_file(str(Path(in_dir) / f"{name}.optimizer.safetensors"))
    meta = json.loads((Path(in_dir) / f"{name}.optimizer.json").read_text())
    for saved, current in zip(meta["param_groups"], optimizer.param_groups):
        saved.update({key: current[key] for key in KERNEL_OPTIONS if key in current})
    state: dict[int, dict] = {}
    for key, value in tensors.items():
        index, slot = key.split(".", 1)
        state.setdefault(int(index), {})[slot] = value
    return {"state": state, "param_groups": meta["param_groups"]}, meta["scheduler"]


def load_optimizer(optimizer: torch.optim.Optimizer, scheduler, in_dir: Path, name: str) -> None:
    state, scheduler_state = read_optimizer_state(in_dir, name, optimizer)
    optimizer.load_state_dict(state)
    scheduler.load_state_dict(scheduler_state)


def generator_state_to_json(generator: torch.Generator) -> str:
    return base64.b64encode(generator.get_state().numpy().tobytes()).decode()


def generator_state_from_json(text: str) -> torch.Tensor:
    return torch.frombuffer(bytearray(base64.b64decode(text)), dtype=torch.uint8)


def begin_checkpoint(run_dir: str | Path, step: int) -> Path:
    tmp = checkpoint_dir(run_dir, step).with_suffix(".tmp")
    if tmp.exists():
        shutil.rmtree(tmp)
    tmp.mkdir(parents=True)
    return tmp


def commit_checkpoint(tmp: Path, keep_last: int) -> Path:
    final = tmp.with_suffix("")
    if final.exists():
        shutil.rmtree(final)
    os.replace(tmp, final)
    finished = sorted(p for p in final.parent.glob("step_*") if not p.name.endswith(".tmp"))
    for old in finished[:-keep_last]:
        shutil.rmtree(old, ignore_errors=True)
    return final


def save_module(module: torch.nn.Module, path: Path) -> None:
    save_tensors(module.state_dict(), path)


def save_tensors(state: dict[str, torch.Tensor], path: Path) -> None:
    save_file({k: v.contiguous() for k, v in state.items()}, str(path))


def load_tensors(path: Path) -> dict[str, torch.Tensor]:
    return load_file(str(path))


def load_module(module: torch.nn.Module, path: Path) -> None:
    module.load_state_dict(load_tensors(path))
