"""The zygote: one sandboxed interpreter, started once, that forks every run.

Started by the parent inside ``unshare`` (its own pid, mount, network, IPC and UTS namespaces), it builds
the filesystem view (``view.py``), imports the common standard library once, then serves jobs from a
socket. A job has one or two roles: the candidate (the policy's program) and, for function tests, the
checker. Each role is one fork of the zygote: pid 1 of a new pid namespace, with mount, IPC and UTS
namespace of its own (the others are the zygote's: see NS_FLAGS), a 0700 work directory of its own,
its own uid (as root) and rlimits. So a run costs a fork,
not an interpreter start-up. When a role's process exits the kernel kills everything left in its pid
namespace; the zygote waits for it (a pidfd), enforces the wall clock and counts processes (where
RLIMIT_NPROC does not hold), kills what is left of a job and reaps it. The zygote never
reads a program or a test (each run reads its own from its pipes), so nothing of one run is in the memory that
the next run inherits. Runs inside the sandbox; the stdlib only.
"""

import io
import json
import os
import select
import signal
import socket
import sys
import time

from . import check, kernel, serve, view

PRELOAD = ("math", "re", "string", "collections", "itertools", "functools", "heapq", "bisect", "typing",
           "hashlib", "random", "statistics", "fractions", "decimal", "json", "copy", "operator", "datetime",
           "dataclasses", "enum", "array", "textwrap", "unicodedata", "traceback", "cmath", "numbers")
CHAN_FD, DATA_FD, REPORT_FD = 4, 5, 6
# No CLONE_NEWNET per run: a network namespace costs ~30 ms to create and tear down here. Runs use the
# zygote's own (only a down loopback, no capability to raise it); one job's processes share it, and
# nothing of a job outlives it.
# Nor a mount namespace per run (copying the view's ~60 mounts and mounting /proc and /tmp again cost
# more than the rest of a run): runs share the zygote's read-only view, its /proc (hidepid=2) and its
# /tmp (mode 0711), each in a 0700 directory of its own that is deleted after the job. A fresh IPC
# namespace per run removes any SysV object a run leaves.
NS_FLAGS = kernel.CLONE_NEWIPC
ROLE_FDS = {"candidate": ("code", "stdin", "stdout", "stderr", "chan"), "checker": ("spec", "report", "stderr", "chan")}

CFG = {}
JOB_SOCK = None


# ------------------------------------------------------------------------------------- a run's process


def _limit_nproc(n, uid):
    """RLIMIT_NPROC counts every task of the uid: without a uid of its own (basic mode, non-root), allow
    for the tasks the user already has."""
    if uid is not None or CFG["in_ns"] or os.getuid() == 0:
        return n
    me, count = os.getuid(), 0
    for p in os.listdir("/proc"):
        if p.isdigit():
            try:
                lines = open(f"/proc/{p}/status").read().splitlines()
            except OSError:
                continue
            u = [line for line in lines if line.startswith(("Uid:", "Threads:"))]
            if len(u) == 2 and int(u[0].split()[1]) == me:
                count += int(u[1].split()[1])
    return n + count


def _become_worker(role, job, workdir):
    import resource

    lim = job["limits"]
    uid = job["uids"].get(role)
    kernel.prctl(kernel.PR_SET_PDEATHSIG, signal.SIGKILL)
    if uid is not None:
        os.setgroups([])
        os.setresgid(uid, uid, uid)
        os.setresuid(uid, uid, uid)
    elif CFG["in_ns"]:
        kernel.drop_capabilities()
    if kernel.prctl(kernel.PR_SET_NO_NEW_PRIVS, 1) != 0:
        raise OSError("PR_SET_NO_NEW_PRIVS failed")
    if role == "checker":
        kernel.prctl(kernel.PR_SET_DUMPABLE, 0)  # no ptrace, no /proc/<pid>/mem, even from the same uid
    cpu = max(1, int(lim["cpu_seconds"] + 0.999))
    mem = int(lim["memory_mb"]) << 20
    fsz = int(lim["max_file_mb"]) << 20
    for res, value in ((resource.RLIMIT_CPU, (cpu, cpu + 1)), (resource.RLIMIT_AS, (mem, mem)),
                       (resource.RLIMIT_NPROC, (_limit_nproc(lim["max_processes"], uid),) * 2),
                       (resource.RLIMIT_FSIZE, (fsz, fsz)), (resource.RLIMIT_NOFILE, (lim["max_open_files"],) * 2),
                       (resource.RLIMIT_CORE, (0, 0))):
        resource.setrlimit(res, value)
    os.chdir(workdir)
    os.environ.clear()
    os.environ.update({"PATH": "/usr/local/bin:/usr/bin:/bin", "LANG": "C.UTF-8", "LC_ALL": "C.UTF-8",
                       "HOME": workdir, "TMPDIR": workdir, "PYTHONIOENCODING": "utf-8"})
    sys.stdin = io.TextIOWrapper(io.BufferedReader(io.FileIO(0, "r", closefd=False)), encoding="utf-8")
    sys.stdout = io.TextIOWrapper(io.BufferedWriter(io.FileIO(1, "w", closefd=False)), encoding="utf-8")
    sys.stderr = io.TextIOWrapper(io.BufferedWriter(io.FileIO(2, "w", closefd=False)), encoding="utf-8",
                                  errors="backslashreplace", line_buffering=True)
    sys.argv = ["main.py"]
    # the checker never imports from a directory a candidate could write to
    sys.path[:] = [*([workdir] if role == "candidate" else []), *CFG["stdlib_path"], view.SITE]
    for sig in (signal.SIGCHLD, signal.SIGTERM, signal.SIGUSR1, signal.SIGALRM):
        signal.signal(sig, signal.SIG_DFL)
    signal.signal(signal.SIGINT, signal.default_int_handler)
    import random

    random.seed()
    with open(DATA_FD, "rb", closefd=True) as f:
        data = f.read().decode("utf-8")
    if role == "checker":
        with socket.socket(fileno=CHAN_FD) as chan:
            check.main(chan, json.loads(data), REPORT_FD, time.monotonic() + lim["wall_seconds"])
        return 0
    with open("main.py", "w", encoding="utf-8") as f:
        f.write(data)
    import types

    main = types.ModuleType("__main__")
    main.__file__ = os.path.join(workdir, "main.py")
    main.__builtins__ = __builtins__
    sys.modules["__main__"] = main
    status = serve.run_program(data, main)
    if status == 0 and job["serve"]:
        with socket.socket(fileno=CHAN_FD) as chan:
            serve.serve(chan, main.__dict__)
    return status


def _worker_exit(status):
    import atexit
    import threading

    try:
        threading._shutdown()
        atexit._run_exitfuncs()
    except BaseException:  # noqa: BLE001
        pass
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except BaseException:  # noqa: BLE001
            pass
    os._exit(status)


# ------------------------------------------------------------------------------------- the zygote's side


def _arrange_fds(role, names, fds):
    """Put the role's descriptors at the numbers the worker expects; close everything else."""
    import fcntl

    given = dict(zip(names, fds))
    null = os.open("/dev/null", os.O_RDWR)
    want = {CHAN_FD: given.get("chan", null), DATA_FD: given[ROLE_FDS[role][0]]}
    if role == "candidate":
        want.update({0: given["stdin"], 1: given["stdout"], 2: given["stderr"]})
    else:
        want.update({0: null, 1: null, 2: given["stderr"], REPORT_FD: given["report"]})
    high = {dst: fcntl.fcntl(src, fcntl.F_DUPFD, 64) for dst, src in want.items()}
    for dst, src in high.items():
        os.dup2(src, dst)
    os.closerange(REPORT_FD + 1, 1 << 20)
    for fd in range(REPORT_FD + 1):
        if fd not in want:
            try:
                os.close(fd)
            except OSError:
                pass


def _processes():
    """pids of every run's processes: the zygote's own /proc shows its pid namespace and those nested in
    it; in basic mode, the zygote's descendants on the host."""
    if CFG["in_ns"]:
        return [int(p) for p in os.listdir("/proc") if p.isdigit() and int(p) != os.getpid()]
    kids = {}
    for p in os.listdir("/proc"):
        if p.isdigit():
            try:
                s = open(f"/proc/{p}/stat").read()
            except OSError:
                continue
            kids.setdefault(int(s[s.rfind(")") + 2:].split()[1]), []).append(int(p))
    todo, found = [os.getpid()], []
    while todo:
        for k in kids.get(todo.pop(), []):
            found.append(k)
            todo.append(k)
    return found


def _sweep():
    """Kill every process the job left and reap them. In a namespace mode each role's pid 1 is dead by
    now and the kernel has killed its namespace, so this usually finds nothing."""
    end = time.monotonic() + 2.0
    while time.monotonic() < end:
        left = _processes()
        for pid in left:
            try:
                os.kill(pid, signal.SIGKILL)
            except OSError:
                pass
        try:
            while os.waitpid(-1, os.WNOHANG)[0] > 0:
                pass
        except ChildProcessError:
            if not left:
                return
        if left:
            time.sleep(0.001)


def _fork_run(role, job, names, fds, workdir):
    """Fork one role's process: pid 1 of a new pid namespace (the kernel kills everything in it when it
    exits) with mount, IPC and UTS namespaces of its own. Returns its pid."""
    if CFG["in_ns"]:
        kernel.unshare(kernel.CLONE_NEWPID)  # only a fork enters a new pid namespace
    try:
        pid = os.fork()
    except BaseException:
        if CFG["in_ns"]:
            kernel.setns(CFG["pidns_fd"], kernel.CLONE_NEWPID)
        raise
    if pid != 0:
        if CFG["in_ns"]:
            kernel.setns(CFG["pidns_fd"], kernel.CLONE_NEWPID)  # back to ours, for the next unshare
        return pid
    status = 125
    try:
        JOB_SOCK.detach()
        _arrange_fds(role, names, fds)
        os.setsid()
        if CFG["in_ns"]:
            kernel.unshare(NS_FLAGS)
        status = _become_worker(role, job, workdir)
    except BaseException as e:  # noqa: BLE001
        try:
            os.write(2, f"sandbox setup failed: {e!r}\n".encode())
        finally:
            os._exit(125)
    _worker_exit(status)


def _workdir(role, uid):
    """A fresh 0700 directory for one run (on the zygote's tmpfs /tmp in a namespace mode)."""
    import tempfile

    path = tempfile.mkdtemp(prefix=f"{role}-", dir="/tmp" if CFG["in_ns"] else None)
    os.chmod(path, 0o700)
    if uid is not None:
        os.chown(path, uid, uid)
    return path


def _size_tmp(mb):
    """The job's disk budget: /tmp is one tmpfs for the runs of a job, resized when the limit changes."""
    if CFG["in_ns"] and CFG.get("view") and CFG["view"]["tmp_mb"] != mb:
        kernel.mount(None, "/tmp", None, kernel.MS_REMOUNT | kernel.MS_NOSUID | kernel.MS_NODEV, f"size={int(mb)}m")
        CFG["view"]["tmp_mb"] = mb


def run_job(job, fds, sock):
    _size_tmp(job["limits"]["max_disk_mb"])
    runs, start = {}, 0
    for role in job["roles"]:
        names = [n for n in ROLE_FDS[role] if n != "chan" or job["serve"]]
        mine = list(fds[start:start + len(names)])
        start += len(names)
        workdir = _workdir(role, job["uids"].get(role))
        pid = _fork_run(role, job, names, mine, workdir)
        runs[role] = {"pid": pid, "pidfd": os.pidfd_open(pid), "status": None, "reason": None, "open": True,
                      "workdir": workdir}
    for fd in fds:
        os.close(fd)
    lim = job["limits"]
    deadline = time.monotonic() + lim["wall_seconds"]
    gate = runs["checker"] if "checker" in runs else runs["candidate"]
    stop_reason, next_count = None, time.monotonic() + 0.05
    while gate["open"]:
        now = time.monotonic()
        if now >= deadline:
            stop_reason = "wall_timeout"
            break
        live = {r["pidfd"]: r for r in runs.values() if r["open"]}
        ready, _, _ = select.select([sock, *live], [], [], max(0.0, min(deadline, next_count) - now))
        if sock in ready:
            message = sock.recv(4096)
            if not message:
                _sweep()
                os._exit(0)  # the parent is gone
            stop_reason = json.loads(message).get("kill", "killed")
            break
        for fd in ready:
            if fd in live:
                run = live[fd]
                _pid, run["status"], usage = os.wait4(run["pid"], 0)
                run["open"] = False
                # pid 1 of a namespace ignores SIGXCPU, so RLIMIT_CPU ends it with the hard limit's SIGKILL
                if os.WIFSIGNALED(run["status"]) and os.WTERMSIG(run["status"]) == signal.SIGKILL and (
                        usage.ru_utime + usage.ru_stime >= int(lim["cpu_seconds"] + 0.999)):
                    run["reason"] = "cpu_limit"
        if time.monotonic() >= next_count:  # RLIMIT_NPROC is not enforced for every uid: count
            next_count = time.monotonic() + 0.05
            if len(_processes()) - sum(r["open"] for r in runs.values()) > lim["max_processes"] * len(runs):
                runs["candidate"]["reason"] = "process_limit"
                stop_reason = "process_limit"
                break
    for run in runs.values():
        if run["open"]:
            try:
                os.kill(run["pid"], signal.SIGKILL)  # pid 1 of the run: the kernel kills the rest of it
                os.waitpid(run["pid"], 0)  # returns once its namespace is empty
            except OSError:
                pass
            if run["reason"] is None and stop_reason is not None and run is gate:
                run["reason"] = stop_reason
            elif run["reason"] is None and stop_reason in ("wall_timeout", "output_limit", "process_limit"):
                run["reason"] = stop_reason
        os.close(run["pidfd"])
    _sweep()
    import shutil

    # everything a job wrote goes: its work directories and, where runs share the zygote's uid
    # (userns), whatever they put in /tmp itself
    leftovers = [os.path.join("/tmp", n) for n in os.listdir("/tmp")] if CFG["in_ns"] else []
    for path in {*(r["workdir"] for r in runs.values()), *leftovers}:
        if os.path.isdir(path) and not os.path.islink(path):
            shutil.rmtree(path, ignore_errors=True)
        else:
            try:
                os.unlink(path)
            except OSError:
                pass
    return {"roles": {role: {"status": r["status"], "reason": r["reason"]} for role, r in runs.items()}}


def main(cfg):
    global JOB_SOCK
    CFG.update(cfg)
    layers = []
    if cfg["in_ns"]:
        layers += ["pid_ns", "net_ns", "mount_ns", "ipc_ns", "uts_ns"]
        if cfg.get("view"):
            view.build(cfg["view"])
            layers += ["readonly_fs", "minimal_root", "private_workdir", "hidepid"]
    else:
        kernel.prctl(kernel.PR_SET_CHILD_SUBREAPER, 1)
        layers += ["subreaper", "host_filesystem"]  # no mount namespace: the host's files are visible
    layers += ["no_new_privs", "rlimits", "scrubbed_env"]
    for name in PRELOAD:
        __import__(name)
    import gc

    gc.collect()
    gc.freeze()  # the runs' collector then never walks (and so never copies) the zygote's objects
    CFG["stdlib_path"] = [p for p in sys.path if p]
    CFG["pidns_fd"] = os.open("/proc/self/ns/pid", os.O_RDONLY) if cfg["in_ns"] else None
    JOB_SOCK = socket.socket(fileno=cfg["job_fd"])
    JOB_SOCK.send(json.dumps({"ready": True, "layers": layers}).encode())
    while True:
        try:
            message, fds, _flags, _addr = socket.recv_fds(JOB_SOCK, 65536, 16)
        except OSError:
            return
        if not message:
            return
        job = json.loads(message)
        if "kill" in job:  # a kill for a job that has already ended
            for fd in fds:
                os.close(fd)
            continue
        try:
            reply = run_job(job, fds, JOB_SOCK)
        except Exception as e:  # noqa: BLE001 - reported to the parent, which restarts the zygote
            reply = {"error": f"zygote: {e!r}"}
        JOB_SOCK.send(json.dumps(reply).encode())
