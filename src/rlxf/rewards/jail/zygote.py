"""The zygote: one sandboxed interpreter, started once, that forks every run.

Started by the parent inside ``unshare`` (its own pid, mount, network, IPC and UTS namespaces), it builds
the filesystem view (``view.py``), imports the common standard library once, then serves jobs from a
socket. A job has one or two roles: the candidate (the policy's program) and, for function tests, the
checker. Each role gets a fresh set of namespaces of its own, a private tmpfs /tmp, its own uid (as root)
and rlimits, so a run costs two forks instead of two interpreter start-ups:

    zygote ── fork A (unshare pid/mount/net/ipc/uts) ── fork B: init, pid 1 of the run ── fork C: the worker

B mounts /proc and /tmp, watches the run's process count and reports how C ended on a status pipe that
C never holds; when B exits the kernel kills everything left in the run's pid namespace. The zygote never
reads a program or a test (C reads them from its own pipes), so nothing of one run is in the memory that
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
STATUS_FD, CHAN_FD, DATA_FD, REPORT_FD = 3, 4, 5, 6
NS_FLAGS = kernel.CLONE_NEWNS | kernel.CLONE_NEWPID | kernel.CLONE_NEWNET | kernel.CLONE_NEWIPC | kernel.CLONE_NEWUTS
ROLE_FDS = {"candidate": ("code", "stdin", "stdout", "stderr", "chan"), "checker": ("spec", "report", "stderr", "chan")}

CFG = {}
JOB_SOCK = None


def _status(**kw):
    os.write(STATUS_FD, (json.dumps(kw) + "\n").encode())


# ------------------------------------------------------------------------------------- the worker (C)


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
    sys.path[:] = [workdir, *CFG["stdlib_path"], view.SITE]
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


# ------------------------------------------------------------------------------------- the run's init (B)


def _count_processes():
    return sum(1 for p in os.listdir("/proc") if p.isdigit())


def _basic_descendants():
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


def _kill_descendants():
    end = time.monotonic() + 2.0
    while time.monotonic() < end:
        found = _basic_descendants()
        for pid in found:
            try:
                os.kill(pid, signal.SIGKILL)
            except OSError:
                pass
        try:
            while os.waitpid(-1, os.WNOHANG)[0] > 0:
                pass
        except ChildProcessError:
            if not found:
                return
        time.sleep(0.002)


def _run_init(role, job):
    lim = job["limits"]
    uid = job["uids"].get(role)
    if CFG["in_ns"]:
        kernel.mount("proc", "/proc", "proc", kernel.MS_NOSUID | kernel.MS_NODEV | kernel.MS_NOEXEC, "hidepid=2")
        kernel.mount("tmpfs", "/tmp", "tmpfs", kernel.MS_NOSUID | kernel.MS_NODEV,
                     f"size={int(lim['max_disk_mb'])}m,mode=0700")
        workdir = "/tmp"
    else:
        import tempfile

        kernel.prctl(kernel.PR_SET_CHILD_SUBREAPER, 1)
        workdir = tempfile.mkdtemp(prefix="rlxf-sandbox-")
        os.chmod(workdir, 0o700)
    if uid is not None:
        os.chown(workdir, uid, uid)
    worker = os.fork()
    if worker == 0:
        status = 125
        try:
            os.close(STATUS_FD)
            status = _become_worker(role, job, workdir)
        except BaseException as e:  # noqa: BLE001
            try:
                os.write(2, f"sandbox setup failed: {e!r}\n".encode())
            finally:
                os._exit(125)
        _worker_exit(status)
    for fd in (0, 1, 2, CHAN_FD, DATA_FD, REPORT_FD):
        try:
            os.close(fd)
        except OSError:
            pass
    pidfd = os.pidfd_open(worker)
    while True:
        select.select([pidfd], [], [], 0.05)
        try:
            while True:
                pid, st = os.waitpid(-1, os.WNOHANG)
                if pid == 0:
                    break
                if pid == worker:
                    _status(exit=st)
                    if not CFG["in_ns"]:
                        _kill_descendants()
                        import shutil

                        shutil.rmtree(workdir, ignore_errors=True)
                    os._exit(0)  # pid 1 of the run: the kernel now kills whatever is left in it
        except ChildProcessError:
            pass
        if CFG["in_ns"] and _count_processes() - 1 > lim["max_processes"]:
            _status(reason="process_limit")
            os._exit(0)


# ------------------------------------------------------------------------------------- one role (A)


def _arrange_fds(role, names, fds):
    """Put the role's descriptors at the numbers the worker expects; close everything else."""
    import fcntl

    given = dict(zip(names, fds))
    null = os.open("/dev/null", os.O_RDWR)
    want = {STATUS_FD: given["status"], CHAN_FD: given.get("chan", null), DATA_FD: given[ROLE_FDS[role][0]]}
    if role == "candidate":
        want.update({0: given["stdin"], 1: given["stdout"], 2: given["stderr"]})
    else:
        want.update({0: null, 1: null, 2: given["stderr"], REPORT_FD: given["report"]})
    high = {dst: fcntl.fcntl(src, fcntl.F_DUPFD, 64) for dst, src in want.items()}
    for dst, src in high.items():
        os.dup2(src, dst)
    os.closerange(max(high) + 1 if high else 7, 1 << 20)
    for fd in range(7):
        if fd not in want:
            try:
                os.close(fd)
            except OSError:
                pass


def _run_role(role, job, names, fds):
    JOB_SOCK.detach()
    _arrange_fds(role, names, fds)
    os.setsid()
    if CFG["in_ns"]:
        kernel.unshare(NS_FLAGS)
    init = os.fork()
    if init == 0:
        _run_init(role, job)
        os._exit(0)
    _status(init=init)
    os.waitpid(init, 0)
    os._exit(0)


# ------------------------------------------------------------------------------------- the zygote


def _sweep():
    """Kill every process of finished runs and reap them."""
    if CFG["in_ns"]:
        for _ in range(1000):
            left = [int(p) for p in os.listdir("/proc") if p.isdigit() and int(p) != os.getpid()]
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
    else:
        _kill_descendants()


def _kill(run):
    for pid in (run["init"], run["a"]):
        if pid:
            try:
                os.kill(pid, signal.SIGKILL)
            except OSError:
                pass


def run_job(job, fds, sock):
    sizes = [len(ROLE_FDS[r]) - (0 if job["serve"] else 1) for r in job["roles"]]
    runs, start = {}, 0
    for role, size in zip(job["roles"], sizes):
        mine = list(fds[start:start + size])
        start += size
        st_r, st_w = os.pipe()
        pid = os.fork()
        if pid == 0:
            try:
                names = ["status", *(n for n in ROLE_FDS[role] if n != "chan" or job["serve"])]
                _run_role(role, job, names, [st_w, *mine])
            finally:
                os._exit(126)
        os.close(st_w)
        runs[role] = {"a": pid, "st": st_r, "init": None, "status": None, "reason": None, "open": True, "buf": b""}
    for fd in fds:
        os.close(fd)
    deadline = time.monotonic() + job["limits"]["wall_seconds"]
    gate = runs["checker"] if "checker" in runs else runs["candidate"]
    stop_reason = None
    while gate["open"]:
        left = deadline - time.monotonic()
        if left <= 0:
            stop_reason = "wall_timeout"
            break
        live = {r["st"]: r for r in runs.values() if r["open"]}
        ready, _, _ = select.select([sock, *live], [], [], left)
        if sock in ready:
            message = sock.recv(4096)
            if not message:
                _sweep()
                os._exit(0)  # the parent is gone
            stop_reason = json.loads(message).get("kill", "killed")
            break
        for fd in ready:
            if fd is sock:
                continue
            run = live[fd]
            data = os.read(fd, 4096)
            if not data:
                run["open"] = False
                os.close(fd)
                continue
            run["buf"] += data
            *lines, run["buf"] = run["buf"].split(b"\n")
            for line in lines:
                msg = json.loads(line)
                run["init"] = msg.get("init", run["init"])
                run["status"] = msg.get("exit", run["status"])
                run["reason"] = msg.get("reason", run["reason"])
    for run in runs.values():
        if run["open"]:
            _kill(run)
            if run["status"] is None and run["reason"] is None and stop_reason is not None:
                run["reason"] = stop_reason
            os.close(run["st"])
    _sweep()
    return {"roles": {role: {"status": r["status"], "reason": r["reason"]} for role, r in runs.items()}}


def main(cfg):
    global JOB_SOCK
    CFG.update(cfg)
    layers = []
    if cfg["in_ns"]:
        layers += ["pid_ns", "net_ns", "mount_ns", "ipc_ns", "uts_ns"]
        if cfg.get("view"):
            view.build(cfg["view"])
            layers += ["readonly_fs", "minimal_root", "private_tmp", "hidepid"]
    else:
        kernel.prctl(kernel.PR_SET_CHILD_SUBREAPER, 1)
        layers += ["subreaper", "host_filesystem"]  # no mount namespace: the host's files are visible
    layers += ["no_new_privs", "rlimits", "scrubbed_env"]
    for name in PRELOAD:
        __import__(name)
    CFG["stdlib_path"] = [p for p in sys.path if p]
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
