"""Writes into rlxf's cache (the tiny model's build): a write that fails (a file-size limit, a full disk, a
read-only cache) or a disk without room for it is one ``rlxf:`` line naming what and where, exit code 1, no
traceback, and no staging folder is left behind; a later build removes the stale ones of killed builds."""

from __future__ import annotations

import errno
import os
import resource
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from rlxf import disk_space
from rlxf.cli import main
from rlxf.models import cache_writes, tiny
from rlxf.models.cache_writes import CacheWriteError, remove_stale_staging
from rlxf.models.tiny import build_tiny_model

SMALL = {"hidden_size": 32, "num_layers": 1, "num_heads": 2, "intermediate_size": 64}
RUN = ["train.steps=1", "sft.steps=0", "logging.progress_bar=false", "logging.sinks=[jsonl]", "logging.plot=false"]


def _one_line(err: str) -> str:
    lines = [line for line in err.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("rlxf: "), err
    return lines[0]


def test_a_file_size_limit_while_building_the_tiny_model_is_one_line(tmp_path):
    """The issue's case, for real: ``ulimit -f`` (RLIMIT_FSIZE) makes the weights' write fail with EFBIG."""
    cache = tmp_path / "cache"
    env = {**os.environ, "RLXF_CACHE_DIR": str(cache), "PYTHONPATH": os.pathsep.join(sys.path)}
    limit = 400 * 1024  # the run's small files fit, the tiny model's 13 MB of weights do not

    def limited() -> None:
        resource.setrlimit(resource.RLIMIT_FSIZE, (limit, resource.getrlimit(resource.RLIMIT_FSIZE)[1]))

    done = subprocess.run([sys.executable, "-m", "rlxf.cli", "train", f"run_dir={tmp_path / 'run'}", *RUN],
                          env=env, capture_output=True, text=True, preexec_fn=limited, timeout=300)
    assert done.returncode == 1, done.stderr
    line = _one_line(done.stderr)
    assert line.startswith(f"rlxf: writing the weights of the tiny model tiny-default to {cache / 'models'}/"
                           ".tiny-default.pid"), line
    assert "File too large" in line and "Traceback" not in done.stderr
    assert list((cache / "models").iterdir()) == []  # its staging folder is gone


def _disk_full(*args, **kwargs):
    raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))


def _fail_tokenizer(monkeypatch):
    from transformers import PreTrainedTokenizerFast

    monkeypatch.setattr(PreTrainedTokenizerFast, "save_pretrained", _disk_full)


def _fail_cache_folder(monkeypatch):
    real_mkdir = Path.mkdir

    def read_only(self, *args, **kwargs):
        if self.name == "models":
            raise OSError(errno.EROFS, os.strerror(errno.EROFS), str(self))
        return real_mkdir(self, *args, **kwargs)

    monkeypatch.setattr(Path, "mkdir", read_only)


FAILURES = {  # where the write fails -> (inject it, the start of the message after "rlxf: ")
    "weights": (lambda mp: mp.setattr(tiny, "save_model", _disk_full),
                "writing the weights of the tiny model tiny-default to {models}/.tiny-default.pid"),
    "tokenizer": (_fail_tokenizer, "writing the tokenizer files of the tiny model tiny-default to {models}/.tiny-default.pid"),
    "cache folder": (_fail_cache_folder,
                     "creating rlxf's cache folder {models} for the tiny model tiny-default failed (Read-only file "
                     "system); nothing was cached"),
}


@pytest.mark.parametrize("where", FAILURES)
def test_each_failed_write_of_the_tiny_build_is_one_line_and_leaves_nothing(where, tmp_path, monkeypatch, capsys):
    cache = tmp_path / "cache"
    monkeypatch.setenv("RLXF_CACHE_DIR", str(cache))
    inject, message = FAILURES[where]
    inject(monkeypatch)
    assert main(["train", f"run_dir={tmp_path / 'run'}", *RUN]) == 1
    line = _one_line(capsys.readouterr().err)
    assert line.startswith("rlxf: " + message.format(models=cache / "models", cache=cache)), line
    if where != "cache folder":
        assert "failed (No space left on device); nothing was cached" in line
        assert list((cache / "models").iterdir()) == []


def test_a_cache_without_room_for_the_tiny_model_is_refused_before_writing(tmp_path, monkeypatch, capsys):
    cache = tmp_path / "cache"
    monkeypatch.setenv("RLXF_CACHE_DIR", str(cache))
    monkeypatch.setattr(disk_space, "free_bytes", lambda path: 200 * 10**6)
    assert main(["train", f"run_dir={tmp_path / 'run'}", *RUN]) == 1
    line = _one_line(capsys.readouterr().err)
    assert line.startswith(f"rlxf: not enough free space to write the tiny model tiny-default in {cache / 'models'}: "
                           "it needs 283 MB (13.8 MB plus a 5% margin and 268 MB left free), 200 MB is free"), line
    assert not (cache / "models").exists() or list((cache / "models").iterdir()) == []


def test_a_failed_build_can_be_retried(tmp_path, monkeypatch):
    monkeypatch.setattr(tiny, "save_model", _disk_full)
    with pytest.raises(CacheWriteError):
        build_tiny_model(tmp_path / "tiny", **SMALL)
    monkeypatch.undo()
    built = build_tiny_model(tmp_path / "tiny", **SMALL)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["tiny"] and (built / "model.safetensors").exists()


def _dead_pid() -> int:
    done = subprocess.Popen(["true"])
    done.wait()
    return done.pid


def test_a_build_removes_the_staging_folders_of_builds_that_are_gone(tmp_path):
    host = socket.gethostname()
    dead = tmp_path / f".tiny.pid{_dead_pid()}.{host}.abcd1234"  # a build killed half-way
    live = tmp_path / f".tiny.pid{os.getpid()}.{host}.efgh5678"  # a build in progress (this process)
    elsewhere = tmp_path / f".tiny.pid{_dead_pid()}.another-machine.ijkl9012"  # on a shared cache: not ours to judge
    old = tmp_path / ".tiny-mnop3456"  # the older naming, no process in it: stale after an hour
    recent = tmp_path / ".tiny-qrst7890"
    other = tmp_path / ".tiny-long.pid1.x.uvwx1234"  # another model's
    for folder in (dead, live, elsewhere, old, recent, other):
        folder.mkdir()
        (folder / "model.safetensors").write_bytes(b"half")
    two_hours_ago = time.time() - 7200
    os.utime(old, (two_hours_ago, two_hours_ago))
    assert sorted(remove_stale_staging(tmp_path / "tiny")) == sorted([dead, old])
    build_tiny_model(tmp_path / "tiny", **SMALL)
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(["tiny", live.name, elsewhere.name, recent.name,
                                                                 other.name])
    assert cache_writes.UNOWNED_STALE_SECONDS == 3600
