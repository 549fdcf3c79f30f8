"""Checkpoints as safetensors + JSON (no pickled model state), written atomically.

Layout of ``RUN_DIR/checkpoints/step_000042/``:

* ``policy/``                — ``save_pretrained`` output: loads with ``AutoModelForCausalLM``;
* ``<engine>.optimizer.safetensors`` + ``<engine>.optimizer.json`` — optimizer and LR-schedule state;
* ``<name>.safetensors``      — other module weights (the critic);
* ``state.json``              — the loop's state: step, data position, RNG states, KL controller.

* ``checksums.json``         — the SHA-256 of every other file, written last.

A checkpoint is written to ``step_N.tmp`` and renamed into place, so a run killed mid-save, or a write
that fails (disk full, permissions: :class:`CheckpointWriteError`), leaves the previous checkpoint
intact, and one that would not fit in the free space is refused before it starts (:class:`CheckpointSpaceError`,
rlxf/disk_space.py). On resume :func:`latest_valid_checkpoint` checks the checksums and falls back to the newest
checkpoint that is whole, saying which one it skipped and why.
"""

from __future__ import annotations

import base64
import hashlib
import json
import os
import shutil
from collections.abc import Callable, Collection
from pathlib import Path

import torch
from safetensors.torch import load_file, save_file

from rlxf.disk_space import folder_bytes, shortfall_text, space_shortfall
from rlxf.errors import RlxfError
from rlxf.models.saving import weight_bytes

CHECKPOINTS = "checkpoints"
CHECKSUMS = "checksums.json"


class CheckpointWriteError(RlxfError, OSError):
    """A checkpoint could not be written; the previous one is untouched."""


class CheckpointSpaceError(CheckpointWriteError):
    """The file system has no room for the next checkpoint: nothing was written, the previous one is untouched."""


class CheckpointCorruptError(RlxfError, RuntimeError):
    """No checkpoint of a run is whole."""


def checkpoint_dir(run_dir: str | Path, step: int) -> Path:
    return Path(run_dir) / CHECKPOINTS / f"step_{step:06d}"


def finished_checkpoints(run_dir: str | Path) -> list[Path]:
    """Committed checkpoints, oldest first."""
    root = Path(run_dir) / CHECKPOINTS
    return sorted(p for p in root.glob("step_*") if p.is_dir() and not p.name.endswith(".tmp"))


def latest_checkpoint(run_dir: str | Path) -> Path | None:
    done = finished_checkpoints(run_dir)
    return done[-1] if done else None


def file_digests(folder: Path) -> dict[str, str]:
    """Relative path -> SHA-256 of every file under ``folder`` except the checksum file itself."""
    digests = {}
    for path in sorted(p for p in folder.rglob("*") if p.is_file() and p.name != CHECKSUMS):
        sha = hashlib.sha256()
        with path.open("rb") as handle:
            for block in iter(lambda: handle.read(1 << 20), b""):
                sha.update(block)
        digests[path.relative_to(folder).as_posix()] = sha.hexdigest()
    return digests


def checkpoint_problem(checkpoint: Path) -> str | None:
    """What is wrong with a checkpoint's files (missing, truncated, changed), or None when whole.
    A checkpoint written before checksums existed has nothing to check against and passes."""
    listed = checkpoint / CHECKSUMS
    if not listed.exists():
        return None
    try:
        expected = json.loads(listed.read_text())
    except ValueError as err:
        return f"{CHECKSUMS} is unreadable ({err})"
    actual = file_digests(checkpoint)
    for name, digest in expected.items():
        if name not in actual:
            return f"{name} is missing"
        if actual[name] != digest:
            return f"{name} does not match its checksum (truncated or changed)"
    return None


def latest_valid_checkpoint(run_dir: str | Path, write: Callable[[str], None] = print) -> Path | None:
    """The newest checkpoint whose files match their checksums and that holds the optimizer state to continue
    from; each newer one skipped is reported. Raises :class:`CheckpointCorruptError` when checkpoints exist but
    none is whole and resumable."""
    done = finished_checkpoints(run_dir)
    for checkpoint in reversed(done):
        problem = checkpoint_problem(checkpoint)
        if problem is None and is_resumable(checkpoint):
            return checkpoint
        if problem is None:
            write(f"checkpoint {checkpoint.name} holds the policy weights only (no optimizer state): training "
                  "cannot continue from it; falling back to the one before it")
        else:
            write(f"checkpoint {checkpoint.name} is corrupt: {problem}; falling back to the one before it")
    if done:
        raise CheckpointCorruptError(f"no checkpoint in {Path(run_dir) / CHECKPOINTS} is whole and resumable (all "
                                     f"{len(done)} failed their checksums or hold the policy weights only); start a "
                                     "new run (from one's policy/ as model.path) or restore one from a backup")
    return None


# What only continued training reads: the optimizer and schedule states, and the critic's weights. A checkpoint
# without them holds the policy weights (and tokenizer, state.json) only: it loads, evaluates and serves, but
# training cannot continue from it (checkpoint.keep_optimizer, rlxf prune).
TRAINING_ONLY = ("*.optimizer.safetensors", "*.optimizer.json", "critic.safetensors")


def is_resumable(checkpoint: Path) -> bool:
    return any(checkpoint.glob("*.optimizer.json"))


def training_only_files(checkpoint: Path) -> list[Path]:
    return sorted({path for pattern in TRAINING_ONLY for path in checkpoint.glob(pattern) if path.is_file()})


def _checksums_without(checkpoint: Path, files: list[Path]) -> str | None:
    """``checksums.json``'s text once ``files`` are gone (None: the checkpoint has none)."""
    listed = checkpoint / CHECKSUMS
    if not listed.exists():
        return None
    names = {path.relative_to(checkpoint).as_posix() for path in files}
    return json.dumps({k: v for k, v in json.loads(listed.read_text()).items() if k not in names}, indent=1)


def weights_only_savings(checkpoint: Path) -> int:
    """The bytes :func:`drop_training_state` frees from ``checkpoint`` (0 when it holds the weights only)."""
    files = training_only_files(checkpoint)
    if not files:
        return 0
    checksums = _checksums_without(checkpoint, files)
    shrink = 0 if checksums is None else (checkpoint / CHECKSUMS).stat().st_size - len(checksums.encode())
    return sum(path.stat().st_size for path in files) + shrink


def drop_training_state(checkpoint: Path) -> int:
    """Remove what only continued training reads (``TRAINING_ONLY``) from ``checkpoint``; its checksums stay
    whole. The checksum list is replaced first, so a process killed half-way leaves a whole checkpoint (that
    may still hold some of the files). Returns the bytes freed."""
    freed = weights_only_savings(checkpoint)
    files = training_only_files(checkpoint)
    checksums = _checksums_without(checkpoint, files)
    if checksums is not None:
        fresh = checkpoint / f"{CHECKSUMS}.tmp"
        fresh.write_text(checksums)
        os.replace(fresh, checkpoint / CHECKSUMS)
    for path in files:
        path.unlink()
    return freed


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


def write_checkpoint(run_dir: str | Path, step: int, keep_last: int, fill: Callable[[Path], None],
                     keep_steps: Collection[int] = (), expected_bytes: int = 0) -> Path:
    """``fill(folder)`` writes the checkpoint's files into a temporary folder, which is checksummed and
    renamed into place. A failed write removes the temporary folder and raises
    :class:`CheckpointWriteError`; the previous checkpoint is never touched. Rotation keeps the newest
    ``keep_last`` checkpoints and those of ``keep_steps`` (the best one's step, ``checkpoint.keep_best``).

    Before anything is written, the free space of the file system is checked against the checkpoint's size
    (the larger of the last one written and ``expected_bytes``, an estimate from the parameters:
    :func:`training_checkpoint_bytes`) with a margin: one that will not fit raises
    :class:`CheckpointSpaceError` instead of filling the disk."""
    tmp = checkpoint_dir(run_dir, step).with_suffix(".tmp")
    previous = latest_checkpoint(run_dir)
    kept = f"the previous checkpoint {previous} is intact" if previous else "there is no earlier checkpoint"

    def failed(err: BaseException) -> CheckpointWriteError:
        shutil.rmtree(tmp, ignore_errors=True)
        return CheckpointWriteError(f"writing checkpoint step {step} to {tmp} failed ({err}); {kept}")

    try:
        begin_checkpoint(run_dir, step)  # inside: a checkpoints/ folder that cannot be written fails here
    except Exception as err:  # noqa: BLE001 - permissions, a file in the way: all alike here
        raise failed(err) from err
    estimate = max(expected_bytes, folder_bytes(previous) if previous else 0)
    short = space_shortfall(tmp.parent, estimate)
    if short:
        shutil.rmtree(tmp, ignore_errors=True)
        raise CheckpointSpaceError(f"not enough free space for checkpoint step {step} in {tmp.parent}: "
                                   f"{shortfall_text(estimate, *short)}; {kept}; free space, then continue with: "
                                   f"rlxf train --resume {run_dir}")
    try:
        fill(tmp)
        (tmp / CHECKSUMS).write_text(json.dumps(file_digests(tmp), indent=1))
    except Exception as err:  # noqa: BLE001 - disk full, permissions, a serializer's own error: all alike here
        raise failed(err) from err
    return commit_checkpoint(tmp, keep_last, keep_steps)


def training_checkpoint_bytes(model: torch.nn.Module) -> int:
    """About what a resumable checkpoint of ``model`` takes: its weights as saved, and AdamW's two moments of
    each trainable parameter (in the parameter's dtype)."""
    trainable = sum(p.numel() * p.element_size() for p in model.parameters() if p.requires_grad)
    return weight_bytes(model) + 2 * trainable


def checkpoint_step(checkpoint: Path) -> int:
    return int(checkpoint.name.removeprefix("step_"))


def commit_checkpoint(tmp: Path, keep_last: int, keep_steps: Collection[int] = ()) -> Path:
    """Rename ``tmp`` into place; rotation deletes all but the newest ``keep_last`` checkpoints, and of those of
    ``keep_steps`` past them keeps the policy weights only."""
    final = tmp.with_suffix("")
    if final.exists():
        shutil.rmtree(final)
    os.replace(tmp, final)
    finished = sorted(p for p in final.parent.glob("step_*") if not p.name.endswith(".tmp"))
    for old in finished[:-keep_last]:
        if checkpoint_step(old) not in keep_steps:
            shutil.rmtree(old, ignore_errors=True)
        else:  # kept for its weights (the best evaluation's): training continues from the newest ones only
            drop_training_state(old)
    return final


def save_module(module: torch.nn.Module, path: Path) -> None:
    save_tensors(module.state_dict(), path)


def save_tensors(state: dict[str, torch.Tensor], path: Path) -> None:
    save_file({k: v.contiguous() for k, v in state.items()}, str(path))


def load_tensors(path: Path) -> dict[str, torch.Tensor]:
    return load_file(str(path))


def load_module(module: torch.nn.Module, path: Path) -> None:
    module.load_state_dict(load_tensors(path))
