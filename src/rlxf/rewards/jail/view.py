"""The candidate's filesystem view, built once by the zygote inside its mount namespace: a read-only
tmpfs root holding read-only binds of the interpreter, its shared libraries and standard library (with
any site-packages hidden), the allowed packages under ``SITE``, a few devices, a fresh /proc and an
empty /tmp (each run mounts its own tmpfs there). Then ``pivot_root`` into it and detach the old root, so
no path leads back to the host's files. Runs inside the sandbox; the stdlib only."""

import os

from . import kernel

SITE = "/opt/rlxf-site"
DEVICES = ("null", "zero", "full", "random", "urandom")


def _materialize(root, path, bound):
    """Make ``path`` exist under ``root`` as on the host: directories created, symbolic links copied
    (and followed), the final file or directory bound read-only."""
    parts = os.path.normpath(path).strip("/").split("/")
    cur = ""
    for i, part in enumerate(parts):
        cur = f"{cur}/{part}"
        if any(cur == b or cur.startswith(b + "/") for b in bound):
            return  # already visible through a bound directory
        inside = root + cur
        if os.path.islink(cur):
            if not os.path.lexists(inside):
                os.symlink(os.readlink(cur), inside)
            rest = "/".join(parts[i + 1:])
            target = os.path.normpath(os.path.join(os.path.dirname(cur), os.readlink(cur)))
            _materialize(root, f"{target}/{rest}" if rest else target, bound)
            return
        if i < len(parts) - 1:
            if not os.path.isdir(inside):
                os.mkdir(inside, 0o755)
            continue
        if os.path.isdir(cur):
            os.makedirs(inside, 0o755, exist_ok=True)
        elif os.path.exists(cur):
            open(inside, "a").close()
        else:
            return
        kernel.bind_readonly(cur, inside)
        bound.add(cur)


def build(view):
    """Switch this process's root to the minimal view described by ``view`` (see sandbox_view.py)."""
    root = view["mount_point"]
    kernel.mount("tmpfs", root, "tmpfs", kernel.MS_NOSUID | kernel.MS_NODEV, "size=1m,mode=0755")
    bound = set()
    for path in sorted(view["paths"], key=len):
        _materialize(root, path, bound)
    for mask in view["masks"]:  # e.g. the interpreter's own site-packages inside its stdlib directory
        if os.path.isdir(root + mask):
            kernel.mount("tmpfs", root + mask, "tmpfs", kernel.MS_RDONLY | kernel.MS_NOSUID | kernel.MS_NODEV,
                         "size=4k,mode=0555")
    os.makedirs(root + SITE, 0o755)
    for name, host in view["site"].items():
        target = f"{root}{SITE}/{name}"
        if os.path.isdir(host):
            os.mkdir(target, 0o755)
        else:
            open(target, "a").close()
        kernel.bind_readonly(host, target)
    os.mkdir(root + "/dev", 0o755)
    for dev in DEVICES:
        open(f"{root}/dev/{dev}", "a").close()
        kernel.mount(f"/dev/{dev}", f"{root}/dev/{dev}", None, kernel.MS_BIND)
    for name, target in (("fd", "/proc/self/fd"), ("stdin", "/proc/self/fd/0"), ("stdout", "/proc/self/fd/1"),
                         ("stderr", "/proc/self/fd/2")):
        os.symlink(target, f"{root}/dev/{name}")
    os.mkdir(root + "/proc", 0o555)
    kernel.mount("proc", root + "/proc", "proc", kernel.MS_NOSUID | kernel.MS_NODEV | kernel.MS_NOEXEC, "hidepid=2")
    os.mkdir(root + "/tmp", 0o755)
    kernel.mount("tmpfs", root + "/tmp", "tmpfs", kernel.MS_NOSUID | kernel.MS_NODEV, f"size={view['tmp_mb']}m,mode=0711")
    os.chdir(root)
    os.mkdir(".old")
    kernel.pivot_root(".", ".old")
    os.chdir("/")
    kernel.umount_detach("/.old")
    os.rmdir("/.old")
    kernel.mount(None, "/", None, kernel.MS_REMOUNT | kernel.MS_RDONLY | kernel.MS_NOSUID | kernel.MS_NODEV)
