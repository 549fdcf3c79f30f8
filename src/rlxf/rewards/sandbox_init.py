"""The init program of a sandbox run (``rewards/sandbox.py``), as source text.

It runs as the first process inside the sandbox (pid 1 of the new pid namespace when there is one):
it sets up the mounts, forks the candidate (privileges dropped, limits set, then exec), reaps every
orphan, and reports what it achieved and how the candidate ended on a pipe the candidate never sees.
"""

INIT_SOURCE = r"""
import ctypes, json, os, re, resource, signal, sys, time
cfg = json.loads(sys.argv[1])
rep = cfg["report_fd"]
os.set_inheritable(rep, False)
def report(**kw):
    os.write(rep, (json.dumps(kw) + "\n").encode())
libc = ctypes.CDLL(None, use_errno=True)
libc.mount.argtypes = [ctypes.c_char_p, ctypes.c_char_p, ctypes.c_char_p, ctypes.c_ulong, ctypes.c_void_p]
libc.prctl.argtypes = [ctypes.c_int, ctypes.c_ulong, ctypes.c_ulong, ctypes.c_ulong, ctypes.c_ulong]
def prctl(op, a=0, b=0, c=0, d=0):
    return libc.prctl(op, a, b, c, d)
MS_RDONLY, MS_NOSUID, MS_NODEV, MS_NOEXEC = 1, 2, 4, 8
MS_REMOUNT, MS_NOATIME, MS_NODIRATIME, MS_BIND, MS_REC, MS_RELATIME = 32, 1024, 2048, 4096, 16384, 1 << 21
OPT_FLAGS = {"nosuid": MS_NOSUID, "nodev": MS_NODEV, "noexec": MS_NOEXEC, "noatime": MS_NOATIME,
             "nodiratime": MS_NODIRATIME, "relatime": MS_RELATIME}
layers = []
wd = cfg["workdir"]
pid1 = os.getpid() == 1
if pid1:
    layers += ["pid_ns", "net_ns", "mount_ns", "ipc_ns", "uts_ns"]
    if libc.mount(os.fsencode(wd), os.fsencode(wd), None, MS_BIND | MS_REC, None) != 0:
        report(error="bind mount of workdir failed: errno %d" % ctypes.get_errno()); os._exit(1)
    failed = []
    wdb = os.fsencode(wd)
    for line in open("/proc/self/mountinfo", "rb"):
        f = line.split()
        mp = f[4]
        for code in set(re.findall(rb"\\[0-7]{3}", mp)):  # mountinfo escapes space, tab, newline, backslash
            mp = mp.replace(code, bytes([int(code[1:], 8)]))
        opts = f[5].decode().split(",")
        if mp == wdb or "ro" in opts:
            continue
        flags = MS_REMOUNT | MS_BIND | MS_RDONLY
        for o in opts:
            flags |= OPT_FLAGS.get(o, 0)
        if libc.mount(b"none", mp, None, flags, None) != 0:
            failed.append(mp)
    if failed:
        report(error="read-only remount failed for %s" % failed); os._exit(1)
    layers.append("readonly_fs")
if prctl(36, 1) == 0:  # PR_SET_CHILD_SUBREAPER: orphans of the candidate re-parent to us
    layers.append("subreaper")
uid = cfg["uid"]
layers.append("uid:%d" % uid if uid is not None else "uid:unchanged")
if cfg["drop_caps"]:
    layers.append("no_capabilities")
layers += ["no_new_privs", "rlimits", "scrubbed_env"]

def limit_nproc():
    n = cfg["max_processes"]
    if uid is None and not cfg["drop_caps"] and os.getuid() != 0:
        # basic mode, unprivileged: RLIMIT_NPROC counts every task of our uid, so allow for those
        me = os.getuid(); count = 0
        for p in os.listdir("/proc"):
            if p.isdigit():
                try:
                    st = open("/proc/%s/status" % p).read()
                except OSError:
                    continue
                u = [l for l in st.splitlines() if l.startswith(("Uid:", "Threads:"))]
                if len(u) == 2 and int(u[0].split()[1]) == me:
                    count += int(u[1].split()[1])
        n += count
    return n

child = os.fork()
if child == 0:
    try:
        if uid is not None:
            os.setgroups([])
            os.setresgid(uid, uid, uid)
            os.setresuid(uid, uid, uid)
        if cfg["drop_caps"]:
            if prctl(28, 0x3) != 0:  # PR_SET_SECUREBITS: SECBIT_NOROOT | SECBIT_NOROOT_LOCKED
                raise OSError(ctypes.get_errno(), "PR_SET_SECUREBITS")
            for cap in range(64):
                if prctl(24, cap) != 0:  # PR_CAPBSET_DROP
                    break
        if prctl(38, 1) != 0:  # PR_SET_NO_NEW_PRIVS
            raise OSError(ctypes.get_errno(), "PR_SET_NO_NEW_PRIVS")
        prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG: die with this init (set after the uid change)
        cpu = max(1, int(cfg["cpu_seconds"] + 0.999))
        mem = int(cfg["memory_mb"]) * 1024 * 1024
        fsz = int(cfg["max_file_mb"]) * 1024 * 1024
        for res, lim in ((resource.RLIMIT_CPU, (cpu, cpu + 1)), (resource.RLIMIT_AS, (mem, mem)),
                         (resource.RLIMIT_NPROC, (limit_nproc(),) * 2), (resource.RLIMIT_FSIZE, (fsz, fsz)),
                         (resource.RLIMIT_NOFILE, (cfg["max_open_files"],) * 2), (resource.RLIMIT_CORE, (0, 0))):
            resource.setrlimit(res, lim)
        os.chdir(wd)
        signal.signal(signal.SIGPIPE, signal.SIG_DFL)
        os.execve(cfg["python"], [cfg["python"], "-E", "-s", "-B", cfg["script"]], cfg["env"])
    except BaseException as e:
        try:
            report(error="sandbox setup failed: %r" % (e,))
        finally:
            os._exit(125)
report(layers=layers)
status = None
while True:
    try:
        pid, st = os.wait()
    except ChildProcessError:
        break
    except InterruptedError:
        continue
    if pid == child:
        status = st
        break
if not pid1:  # no namespace to tear down: kill and reap everything left (orphans are our children)
    end = time.monotonic() + 2.0
    while time.monotonic() < end:
        kids = {}
        for p in os.listdir("/proc"):
            if p.isdigit():
                try:
                    s = open("/proc/%s/stat" % p).read()
                except OSError:
                    continue
                kids.setdefault(int(s[s.rfind(")") + 2:].split()[1]), []).append(int(p))
        todo, seen = [os.getpid()], []
        while todo:
            for k in kids.get(todo.pop(), []):
                seen.append(k); todo.append(k)
        for k in seen:
            try:
                os.kill(k, signal.SIGKILL)
            except OSError:
                pass
        try:
            while os.waitpid(-1, os.WNOHANG)[0] > 0:
                pass
        except ChildProcessError:
            break
        time.sleep(0.005)
report(status=status)
os._exit(0)
"""
