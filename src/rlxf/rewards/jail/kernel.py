"""Thin ctypes wrappers for the Linux calls the sandbox needs and Python 3.10/3.11 lack (mount,
unshare, pivot_root, prctl). Runs inside the sandbox; the stdlib only."""

import ctypes
import os
import platform

libc = ctypes.CDLL(None, use_errno=True)
libc.mount.argtypes = [ctypes.c_char_p, ctypes.c_char_p, ctypes.c_char_p, ctypes.c_ulong, ctypes.c_char_p]
libc.umount2.argtypes = [ctypes.c_char_p, ctypes.c_int]
libc.prctl.argtypes = [ctypes.c_int, ctypes.c_ulong, ctypes.c_ulong, ctypes.c_ulong, ctypes.c_ulong]
libc.unshare.argtypes = [ctypes.c_int]
libc.setns.argtypes = [ctypes.c_int, ctypes.c_int]

MS_RDONLY, MS_NOSUID, MS_NODEV, MS_NOEXEC, MS_REMOUNT, MS_BIND, MS_MOVE, MS_REC, MS_PRIVATE = (
    1, 2, 4, 8, 32, 4096, 8192, 16384, 1 << 18)
MNT_DETACH = 2
CLONE_NEWNS, CLONE_NEWUTS, CLONE_NEWIPC, CLONE_NEWPID, CLONE_NEWNET = (
    0x20000, 0x04000000, 0x08000000, 0x20000000, 0x40000000)
PR_SET_PDEATHSIG, PR_SET_DUMPABLE, PR_CAPBSET_DROP, PR_SET_SECUREBITS = 1, 4, 24, 28
PR_SET_CHILD_SUBREAPER, PR_SET_NO_NEW_PRIVS = 36, 38
_PIVOT_ROOT = {"x86_64": 155, "aarch64": 41, "ppc64le": 203, "s390x": 217, "riscv64": 41}


def _check(ret, what):
    if ret != 0:
        err = ctypes.get_errno()
        raise OSError(err, f"{what}: {os.strerror(err)}")


def mount(source, target, fstype=None, flags=0, data=None):
    enc = lambda s: None if s is None else os.fsencode(s)  # noqa: E731
    _check(libc.mount(enc(source), enc(target), enc(fstype), flags, enc(data)), f"mount {target}")


def bind_readonly(source, target):
    """Bind ``source`` on ``target`` and make that view read-only, nosuid, nodev."""
    mount(source, target, None, MS_BIND)
    mount(None, target, None, MS_REMOUNT | MS_BIND | MS_RDONLY | MS_NOSUID | MS_NODEV)


def umount_detach(target):
    _check(libc.umount2(os.fsencode(target), MNT_DETACH), f"umount {target}")


def unshare(flags):
    _check(libc.unshare(flags), "unshare")


def setns(fd, nstype):
    _check(libc.setns(fd, nstype), "setns")


def prctl(op, a=0, b=0, c=0, d=0):
    return libc.prctl(op, a, b, c, d)


def pivot_root(new_root, put_old):
    number = _PIVOT_ROOT.get(platform.machine())
    if number is None:
        raise OSError(f"pivot_root: unknown syscall number on {platform.machine()}")
    _check(libc.syscall(number, os.fsencode(new_root), os.fsencode(put_old)), "pivot_root")


def drop_capabilities():
    """No capability can come back (securebits NOROOT, locked) and the bounding set is empty."""
    _check(prctl(PR_SET_SECUREBITS, 0x3), "PR_SET_SECUREBITS")
    for cap in range(64):
        if prctl(PR_CAPBSET_DROP, cap) != 0:
            break
