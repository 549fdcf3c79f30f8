"""What a candidate may see of the filesystem (computed in the parent, built by ``jail/view.py``).

The view holds the interpreter binary, the shared libraries it and its extension modules load, its
standard library with every ``site-packages``/``dist-packages`` inside it hidden, and each allowed
package (plus its ``<name>.libs`` directory of vendored libraries, and the libraries its extension
modules load). Nothing else of the host: no home, no project tree, no virtualenv, no host /tmp, no
datasets, checkpoints or run directories.
"""

from __future__ import annotations

import functools
import glob
import importlib.util
import os
import shutil
import subprocess
import sys
import sysconfig
from pathlib import Path

LOADER_FILES = ("/etc/ld.so.cache",)


def base_interpreter(python: str | None = None) -> str:
    """The real interpreter binary behind ``python`` (a venv's python is a link to it); started with
    ``-I -S`` it has its standard library and no site-packages."""
    return os.path.realpath(python or sys.executable)


def _interpreter_paths(python: str) -> dict[str, list[str]]:
    """The interpreter's standard library directories, asked of the interpreter itself."""
    code = (
        "import json, sys, sysconfig; p = sysconfig.get_paths();"
        "print(json.dumps({'lib': sorted({p['stdlib'], p['platstdlib']}),"
        " 'site': sorted({p['purelib'], p['platlib']}), 'path': [x for x in sys.path if x]}))"
    )
    out = subprocess.run([python, "-I", "-S", "-c", code], capture_output=True, text=True, timeout=60, check=True)
    import json

    return json.loads(out.stdout)


def _shared_libraries(binaries: list[str]) -> set[str]:
    """Every library ``ldd`` says these ELF files load (and the loader itself)."""
    ldd = shutil.which("ldd")
    libs: set[str] = set()
    if ldd is None or not binaries:
        return libs
    for start in range(0, len(binaries), 200):
        proc = subprocess.run([ldd, *binaries[start:start + 200]], capture_output=True, text=True, timeout=120)
        for line in proc.stdout.splitlines():
            line = line.strip()
            if "=>" in line:
                target = line.split("=>", 1)[1].strip().split(" (")[0].strip()
            else:
                target = line.split(" (")[0].strip()
            if target.startswith("/") and os.path.exists(target):
                libs.add(target)
    return libs


def package_location(name: str) -> list[str]:
    """Host paths to bind for an allowed package: its directory (or module file) and ``<name>.libs``."""
    spec = importlib.util.find_spec(name)
    if spec is None:
        raise ValueError(f"sandbox.allowed_packages: package {name!r} is not installed here")
    if spec.submodule_search_locations:
        paths = [os.path.realpath(p) for p in spec.submodule_search_locations]
    elif spec.origin and os.path.isabs(spec.origin):
        paths = [os.path.realpath(spec.origin)]
    else:
        raise ValueError(f"sandbox.allowed_packages: {name!r} is built into the interpreter, nothing to allow")
    parent = os.path.dirname(paths[0])
    paths += [p for p in glob.glob(os.path.join(parent, f"{name}.libs")) if os.path.isdir(p)]
    return paths


@functools.cache
def filesystem_view(python: str, allowed_packages: tuple[str, ...] = ()) -> dict:
    """The view for ``python`` with ``allowed_packages`` (cached: ``ldd`` over the extension modules
    costs ~0.1 s once)."""
    info = _interpreter_paths(python)
    lib_dirs = [p for p in info["lib"] if os.path.isdir(p)]
    dynload = [p for p in info["path"] if p.endswith("lib-dynload") and os.path.isdir(p)]
    site_dirs = sorted({p for p in info["site"]} | {
        str(d) for lib in lib_dirs for d in Path(lib).glob("*-packages") if d.is_dir()
    })
    site: dict[str, str] = {}
    elves = [python, *glob.glob(os.path.join(sysconfig.get_config_var("LIBDIR") or "/nonexistent", "libpython*"))]
    for d in dynload:
        elves += glob.glob(os.path.join(d, "*.so"))
    for name in allowed_packages:
        for path in package_location(name):
            site[os.path.basename(path)] = path
            if os.path.isdir(path):
                elves += [str(p) for p in Path(path).rglob("*.so")]
    inside_site = lambda lib: any(lib == p or lib.startswith(p + "/") for p in site.values())  # noqa: E731
    # libraries an allowed package vendors (numpy.libs) are found through its bound copy ($ORIGIN)
    libs = {lib for lib in _shared_libraries(elves) if not inside_site(os.path.realpath(lib))}
    paths = {python, *lib_dirs, *dynload, *libs, *(p for p in LOADER_FILES if os.path.exists(p))}
    clashes = sorted(p for p in paths if p.split("/")[1:2] in (["tmp"], ["proc"], ["dev"]))
    if clashes:  # the view mounts its own /tmp, /proc and /dev over these
        raise ValueError(f"the sandbox cannot show {clashes[0]!r}: it lives under /tmp, /proc or /dev")
    # a library the host keeps inside site-packages (never needed by the stdlib) stays hidden
    masks = [d for d in site_dirs if any(d.startswith(lib + "/") for lib in lib_dirs)]
    return {"paths": sorted(paths), "masks": masks, "site": site}
