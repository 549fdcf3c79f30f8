"""CodeTestsReward end to end through the real sandbox."""

from __future__ import annotations

import os
import random
import socket

import pytest

from rlxf.rewards.base import Reward, RewardOutput
from rlxf.rewards.code_reward import CodeTestsReward, extract_program, outputs_match
from rlxf.rewards.sandbox import SandboxLimits, available_isolation

LIMITS = SandboxLimits(
    cpu_seconds=1, wall_seconds=3, memory_mb=256, max_processes=16, max_output_bytes=100_000
)
IO_TESTS = [
    {"input": "1 2\n", "output": "3\n"},
    {"input": "10 -4\n", "output": "6"},
    {"input": "0 0\n", "output": "0\n"},
]
ADD = "a, b = map(int, input().split())\nprint(a + b)\n"


@pytest.fixture(scope="module")
def reward() -> CodeTestsReward:
    return CodeTestsReward(limits=LIMITS, max_workers=4)


def _cmdline_has(pid: str, marker: str) -> bool:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            cmd = f.read()
        with open(f"/proc/{pid}/stat", "rb") as f:
            alive = f.read().rsplit(b")", 1)[1].split()[0] not in (b"Z", b"X")
    except OSError:
        return False
    return alive and marker.encode() in cmd


def fenced(code: str) -> str:
    return f"Here is my solution.\n\n```python\n{code}```\n\nIt reads two ints."


def score_one(reward: CodeTestsReward, response: str, tests) -> RewardOutput:
    return reward.score(["prompt"], [response], [{"tests": tests}])


def test_is_a_reward():
    assert isinstance(CodeTestsReward(), Reward)
    with pytest.raises(ValueError):
        CodeTestsReward(mode="best_of")


def test_extract_program():
    assert extract_program(fenced("print(1)\n")) == "print(1)\n"
    two = "```python\nprint('draft')\n```\nbetter:\n```py\nprint('final')\n```"
    assert extract_program(two) == "print('final')\n"
    assert extract_program("```\nprint(2)\n```") == "print(2)\n"
    assert extract_program("```python\nprint(3)\n") == "print(3)\n"  # truncated generation
    assert extract_program("print(4)") == "print(4)"
    assert outputs_match("3  \n\n", "3") and not outputs_match("3\n4", "3")


def test_correct_program_scores_one(reward):
    out = score_one(reward, fenced(ADD), IO_TESTS)
    assert out.scores == [1.0]
    assert out.components == {"pass_fraction": [1.0], "sandbox_error": [0.0]}


def test_wrong_answer_scores_zero_and_partial_fraction(reward):
    wrong = "a, b = map(int, input().split())\nprint(a - b)\n"  # right only for 0 0
    partial = "a, b = map(int, input().split())\nprint(a + b if a < 5 else 0)\n"  # 2 of 3
    out = reward.score(
        ["p"] * 3, [fenced(wrong), fenced(partial), "no code at all"], [{"tests": IO_TESTS}] * 3
    )
    assert out.scores[0] == pytest.approx(1 / 3)
    assert out.scores[1] == pytest.approx(0.6667, abs=1e-4)
    assert out.scores[2] == 0.0
    strict = CodeTestsReward(mode="all_pass", limits=LIMITS, max_workers=4)
    out = strict.score(["p"] * 2, [fenced(partial), fenced(ADD)], [{"tests": IO_TESTS}] * 2)
    assert out.scores == [0.0, 1.0]
    assert out.components["pass_fraction"][0] == pytest.approx(2 / 3)


def test_assert_style_tests(reward):
    program = "def add(a, b):\n    return a + b if a != 7 else 0\n"
    asserts = ["assert add(1, 2) == 3", "assert add(7, 1) == 8", "assert add(-1, 1) == 0"]
    out = reward.score(
        ["p"] * 3,
        [fenced(program), fenced(program), fenced("def add(a, b):\n    return a + b\n")],
        [{"tests": asserts}, {"tests": "\n".join(asserts)}, {"tests": "\n".join(asserts)}],
    )
    assert out.scores[0] == pytest.approx(2 / 3)
    assert out.scores[1] == 0.0  # one string = one test, all or nothing
    assert out.scores[2] == 1.0


def test_apps_style_dict_tests(reward):
    tests = {"inputs": [t["input"] for t in IO_TESTS], "outputs": [t["output"] for t in IO_TESTS]}
    assert score_one(reward, fenced(ADD), tests).scores == [1.0]


def test_malformed_rows_and_empty_tests_score_zero(reward):
    out = reward.score(
        ["p"] * 4, [fenced(ADD)] * 4, [{"tests": []}, {}, {"tests": 42}, {"tests": [{"x": 1}]}]
    )
    assert out.scores == [0.0] * 4
    assert out.components["sandbox_error"][2:] == [1.0, 1.0]


def test_hostile_programs_score_zero_and_training_goes_on(reward, monkeypatch, tmp_path):
    secret = f"tok-{random.randrange(10**12)}"
    monkeypatch.setenv("RLXF_TEST_SECRET_TOKEN", secret)
    os.chmod(tmp_path, 0o777)
    target = tmp_path / "pwned.txt"
    marker = f"97.{random.randrange(10**6):06d}"
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(1)
    port = server.getsockname()[1]
    # each would print the right answer ("3") only if its attack succeeded
    hostile = {
        "loop": "while True:\n    pass\n",
        "fork_bomb": "import os\nwhile True:\n    try:\n        os.fork()\n    except OSError:\n        pass\n",
        "memory": "x = []\nwhile True:\n    x.append(bytearray(10**8))\n",
        "output": "import sys\nwhile True:\n    sys.stdout.write('3\\n' * 100000)\n",
        "env": "import os\nprint(3 if os.environ.get('RLXF_TEST_SECRET_TOKEN') else 0)\n",
        "write": f"open({str(target)!r}, 'w').write('x')\nprint(3)\n",
        "network": f"import socket\nsocket.create_connection(('127.0.0.1', {port}), timeout=1)\nprint(3)\n",
        "daemon": f"import subprocess, sys\nsubprocess.Popen([sys.executable, '-c', 'import time; time.sleep({marker})', "
                  f"'{marker}'], start_new_session=True)\nprint(3)\n",
    }
    if available_isolation() == "basic":
        del hostile["network"]  # no network namespace here: documented weakness
    tests = [{"input": "1 2\n", "output": "3\n"}]
    try:
        out = reward.score(
            ["p"] * len(hostile), [fenced(c) for c in hostile.values()], [{"tests": tests}] * len(hostile)
        )
    finally:
        server.close()
    by_name = dict(zip(hostile, out.scores, strict=True))
    expected_zero = {k: v for k, v in by_name.items() if k != "daemon"}
    assert all(v == 0.0 for v in expected_zero.values()), by_name
    assert not target.exists()
    for name in ("loop", "fork_bomb", "output"):
        assert out.components["sandbox_error"][list(hostile).index(name)] == 1.0
    # the daemon answered correctly, so it scores, but its child must be gone
    assert by_name["daemon"] == 1.0
    assert not [p for p in os.listdir("/proc") if p.isdigit() and _cmdline_has(p, marker)]
    assert score_one(reward, fenced(ADD), IO_TESTS).scores == [1.0]  # still working afterwards
