"""Wrong programs written to be paid anyway: each class of attack a policy rewarded for passing tests
could find. Every one must score 0 in every isolation mode, while the honest program scores 1.

The tests are HumanEval-shaped: ``tests`` holds a ``check(candidate)`` function and ``check(add)``;
a second row uses plain asserts and no entry point; a third uses function-call pairs.
"""

from __future__ import annotations

import textwrap

import pytest

from rlxf.rewards.code_reward import CodeTestsReward
from rlxf.rewards.sandbox import SandboxLimits
from tests.rewards.sandbox_modes import require_isolation

LIMITS = SandboxLimits(cpu_seconds=1, wall_seconds=2, memory_mb=256, max_output_bytes=100_000)
CHECK = textwrap.dedent("""
    def check(candidate):
        assert candidate(1, 2) == 3
        assert candidate(-5, 5) == 0
        assert abs(candidate(0.5, 0.25) - 0.75) < 1e-9
        for a, b in [(10, 20), (7, 8)]:
            assert candidate(a, b) == a + b
    check(add)
""")
ROWS = {
    "check": {"tests": CHECK, "entry_point": "add"},
    "asserts": {"tests": ["assert add(1, 2) == 3", "assert add(2, 2) == 4",
                          "assert [add(x, 1) for x in range(3)] == [1, 2, 3]",
                          "for r in map(add, [1, 2], [3, 4]):\n    assert r in (4, 6)"]},
    "calls": {"tests": [{"call": "add", "args": [1, 2], "expected": 3}, {"call": "add", "args": [4, 4], "expected": 8}]},
}
HONEST = "def add(a, b):\n    return a + b\n"
WRONG = "def add(a, b):\n    return a - b\n"

ATTACKS = {
    # the exit status
    "exit 0 first": "import os\nos._exit(0)\n" + WRONG,
    "exit 0 at exit": "import atexit, os\natexit.register(lambda: os._exit(0))\n" + WRONG,
    "sys.exit inside": "import sys\ndef add(a, b):\n    sys.exit(0)\n",
    "exit 0 on the first call": "import os\ndef add(a, b):\n    os._exit(0)\n",
    "kill everything it can": "import os, signal\ndef add(a, b):\n    os.kill(-1, signal.SIGKILL)\n",
    # the interpreter's flags and hooks
    "re-run with asserts off": "import os, sys\nif sys.flags.optimize == 0:\n    os.execv(sys.executable, "
                               "[sys.executable, '-O', __file__])\n" + WRONG,
    "trace hook eats asserts": "import sys\ndef tracer(frame, event, arg):\n    if event == 'exception' and "
                               "arg[0] is AssertionError:\n        raise SystemExit(0)\n    return tracer\n"
                               "sys.settrace(tracer)\nimport threading\nthreading.settrace(tracer)\n" + WRONG,
    "excepthook exits 0": "import sys, os\nsys.excepthook = lambda *a: os._exit(0)\n" + WRONG,
    "assert rebound": "import builtins\nbuiltins.AssertionError = type('AE', (BaseException,), {})\n" + WRONG,
    "audit hook": "import sys, os\nsys.addaudithook(lambda ev, args: os._exit(0) if ev == 'exec' else None)\n" + WRONG,
    # objects that lie
    "always equal": "class E:\n    __eq__ = lambda s, o: True\n    __ne__ = lambda s, o: False\n"
                    "    __hash__ = lambda s: 0\n    __lt__ = __gt__ = lambda s, o: True\n"
                    "    __sub__ = lambda s, o: s\n    __abs__ = lambda s: 0\n    __bool__ = lambda s: True\n"
                    "    __contains__ = lambda s, o: True\n"
                    "def add(a, b):\n    return E()\n",
    "int subclass equal to all": "class E(int):\n    __eq__ = lambda s, o: True\n    __ne__ = lambda s, o: False\n"
                                 "    __hash__ = int.__hash__\n    def __sub__(s, o): return 0\n"
                                 "def add(a, b):\n    return E(0)\n",
    "shadow builtins": "def abs(x):\n    return 0\ndef all(x):\n    return True\n"
                       "def range(*a):\n    return []\ndef map(*a):\n    return []\n" + WRONG,
    "raise StopIteration": "def add(a, b):\n    raise StopIteration\n",
    "generator that stops": "def add(a, b):\n    return iter(())\n",
    # reading the tests or the expected values
    "read own source": "import re\nsrc = open(__file__).read()\nfound = re.findall(r'== (\\d+)', src)\n"
                       "def add(a, b):\n    return int(found[0]) if found else None\n",
    "scan memory for tests": "import gc, re\ndef add(a, b):\n    for o in gc.get_objects():\n"
                             "        if isinstance(o, str) and 'candidate(' in o:\n"
                             "            m = re.search(r'candidate\\(%d, %d\\) == (-?\\d+)' % (a, b), o)\n"
                             "            if m: return int(m.group(1))\n    return None\n",
    "inspect the caller": "import sys\ndef add(a, b):\n    f = sys._getframe(1)\n"
                          "    return f.f_locals.get('expected', f.f_globals.get('expected'))\n",
    "read other processes": "import os\nfound = []\nfor p in os.listdir('/proc'):\n    if p.isdigit():\n"
                            "        for name in ('cmdline', 'environ', 'mem'):\n            try:\n"
                            "                found.append(open(f'/proc/{p}/{name}', 'rb').read(4096))\n"
                            "            except OSError:\n                pass\n"
                            "blob = b''.join(found)\n"
                            "def add(a, b):\n    return 3 if b'candidate(1, 2) == 3' in blob else None\n",
    # the channel and the processes around it
    "forge a report": "import os, json, struct\nmsg = json.dumps({'results': [[True, None]] * 4}).encode()\n"
                      "for fd in range(3, 64):\n    try:\n        os.write(fd, struct.pack('>I', len(msg)) + msg)\n"
                      "    except OSError:\n        pass\n" + WRONG,
    "fork a second server": "import os\nos.fork()\n" + WRONG,
    "garbage on the channel": "import socket\ndef add(a, b):\n    s = socket.socket(fileno=4)\n"
                              "    s.sendall(b'\\xff' * 64)\n    return 3\n",
    "hang": "def add(a, b):\n    while True:\n        pass\n",
    "huge answer": "def add(a, b):\n    return [0] * (10 ** 7)\n",
    "deep answer": "def add(a, b):\n    x = []\n    for _ in range(100000):\n        x = [x]\n    return x\n",
}

MODES = ["namespaces", "userns", "basic"]


@pytest.fixture(scope="module", params=MODES)
def reward(request) -> CodeTestsReward:
    return CodeTestsReward(limits=LIMITS, max_workers=2, isolation=require_isolation(request.param))


@pytest.mark.parametrize("row", list(ROWS))
def test_every_attack_scores_zero(reward, row):
    programs = [HONEST, *ATTACKS.values()]
    out = reward.score(["p"] * len(programs), programs, [ROWS[row]] * len(programs))
    assert out.scores[0] == 1.0, "the honest program must pass"
    won = {name: s for name, s in zip(ATTACKS, out.scores[1:]) if s != 0.0}
    assert won == {}, f"attacks that scored on the {row!r} row: {won}"
