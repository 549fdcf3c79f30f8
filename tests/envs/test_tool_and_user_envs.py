"""The tool-calling environment (calculator, python sandbox), the simulated user, reasoning-gym."""

import pytest

from rlxf.awaitables import resolve
from rlxf.envs.base import env_factory
from rlxf.envs.simulated_user import SimulatedUserEnv
from rlxf.envs.tool_use import ToolUseEnv, parse_tool_call
from rlxf.envs.tools import ToolError, calculator


def test_calculator():
    assert calculator("347*582") == "201954"
    assert calculator(" (2+3)**2 - 10/4 ") == "22.5" and calculator("8/2") == "4"
    for bad in ("__import__('os')", "2**1000", "1/0", "x+1", "1" * 300):
        with pytest.raises(ToolError):
            calculator(bad)


@pytest.mark.parametrize("text, call", [
    ("@calc(1+2)", ("calc", "1+2")),
    ("let me see @python(print((1, 2)))\n", ("python", "print((1, 2))")),
    ("@calc(1+2) and then more", None),
    ("42", None),
])
def test_parse_tool_call(text, call):
    assert parse_tool_call(text) == call


def test_tool_env_turns():
    env = ToolUseEnv(aliases={"calc": "calculator"}, call_reward=0.1, max_calls=2)
    assert env.reset({"prompt": "347*582=", "answer": "201954"}) is None
    assert resolve(env.step("@calc(347*582)")) == ("=201954\n", 0.1, False, {"tool": "calc", "tool_ok": True})
    obs, reward, done, _ = resolve(env.step("@nope(1)"))
    assert obs == "=error: unknown tool nope\n" and reward == 0.0 and not done
    obs, reward, done, info = resolve(env.step("201954"))
    assert (obs, reward, done) == (None, 1.1, True)  # arithmetic: correct + format
    assert info["components"] == {"correct": 1.0, "format": 1.0, "tool_calls": 2.0}


CHATML_TOOL_TURN = "\n<|im_start|>tool\n{result}<|im_end|>\n<|im_start|>assistant\n"


def test_tool_env_observation_in_a_chat_template_turn():
    env = ToolUseEnv(aliases={"calc": "calculator"}, reward="math", observation=CHATML_TOOL_TURN)
    env.reset({"prompt": "What is 47 times 83?", "answer": "3901"})
    assert resolve(env.step("@calc(47*83)"))[0] == "\n<|im_start|>tool\n3901<|im_end|>\n<|im_start|>assistant\n"
    assert resolve(env.step("@calc({1})"))[0].startswith("\n<|im_start|>tool\nerror: ")  # braces kept as written
    obs, reward, done, _ = resolve(env.step("47 times 83 is 3901."))
    assert (obs, reward, done) == (None, 1.0, True)
    with pytest.raises(ValueError, match="must hold {result}"):
        ToolUseEnv(observation="<|im_start|>tool\n")


def test_tool_demonstration_matches_what_the_environment_writes():
    from rlxf.data.tool_arithmetic import tool_arithmetic_task

    rows = tool_arithmetic_task(0, 2, digits=2, size=300, tool_demo_fraction=0.5, question="What is {a} {op_word} {b}?",
                                eos="<|im_end|>", observation=CHATML_TOOL_TURN).train
    demo = next(r for r in rows if r["sft_target"] != r["answer"])
    a, b = (int(w.rstrip("?")) for w in demo["prompt"].split()[2::2])
    assert demo["prompt"] == f"What is {a} times {b}?" and demo["answer"] == str(a * b)
    env = ToolUseEnv(aliases={"calc": "calculator"}, observation=CHATML_TOOL_TURN)
    env.reset(demo)
    call = f"@calc({a}*{b})"
    assert demo["sft_target"] == call + "<|im_end|>" + resolve(env.step(call))[0] + str(a * b)
    with pytest.raises(ValueError, match="observation"):
        tool_arithmetic_task(0, 2, digits=2, size=10, observation="no result")


def test_tool_env_stops_calling_after_max_calls():
    env = env_factory("tool_use", {"max_calls": 1})()
    env.reset({"prompt": "1+1=", "answer": "2"})
    assert resolve(env.step("@calculator(1+1)"))[2] is False
    assert resolve(env.step("@calculator(1+1)"))[2] is True  # scored as the answer, whatever it says


def test_python_tool_runs_in_the_sandbox():
    env = ToolUseEnv(tools=["python"])
    env.reset({"prompt": "", "answer": "6"})
    assert resolve(env.step("@python(print(sum([1, 2, 3])))"))[0] == "=6\n"
    obs = resolve(env.step("@python(import os; os._exit(3))"))[0]
    assert obs.startswith("=error: exit status 3")


def test_scripted_user_per_turn_rewards():
    env = SimulatedUserEnv()
    task = {"turns": [{"user": "1+1=", "answer": "2"}, {"user": "2+3=", "answer": "5"}]}
    assert env.reset(task) == "user: 1+1=\nassistant: "
    assert env.step("2") == ("\nuser: 2+3=\nassistant: ", 1.1, False, {"components": {"correct": 1.0, "format": 1.0}})
    obs, reward, done, info = env.step("6")
    assert (obs, reward, done) == (None, 0.1, True) and info["components"]["correct"] == 0.0
    assert [role for role, _ in env.history] == ["user", "assistant", "user", "assistant"]


def other_model_user(task, history):
    return None if len(history) >= 4 else f"again {len(history)}"


def test_user_can_be_any_callable():
    env = SimulatedUserEnv(user="tests.envs.test_tool_and_user_envs:other_model_user", user_format="{message}|")
    assert env.reset({}) == "again 0|"
    assert env.step("a")[:3] == ("\nagain 2|", 0.0, False)
    assert env.step("b")[2] is True


def test_reasoning_gym_task_and_scorer():
    pytest.importorskip("reasoning_gym", reason="reasoning-gym is an optional extra (pip install 'rlxf[reasoning]')")
    from rlxf.data.reasoning_gym import reasoning_gym_task
    from rlxf.rewards.registry import build_reward

    splits = reasoning_gym_task(seed=0, eval_size=5, dataset="chain_sum", size=20,
                                dataset_args={"min_terms": 2, "max_terms": 2, "min_digits": 1, "max_digits": 1})
    assert len(splits.eval) == 5 and 1 <= len(splits.train) <= 20
    assert not {r["prompt"] for r in splits.eval} & {r["prompt"] for r in splits.train}
    rows = splits.train[:2]
    reward = build_reward("reasoning_gym")
    out = reward.score(["", ""], [rows[0]["answer"], f"<answer>{int(rows[1]['answer']) + 1}</answer>"], rows)
    assert out.scores == [1.0, 0.0] and out.components["correct"] == [1.0, 0.0]


def test_scored_last_rewards_only_the_reply_to_the_last_message():
    """A solve-first judge: its first turn is working (unscored), its reply to the claim is the verdict."""
    env = SimulatedUserEnv(user_format="{message}", reply_separator="", scored="last", reward="judge_agreement")
    task = {"turns": [{"user": "check 347+8=\n"}, {"user": "claim 345\n"}], "form": "pointwise", "label": 0}
    assert env.reset(task) == "check 347+8=\n"
    assert env.step("355") == ("claim 345\n", 0.0, False, {"components": {}})
    obs, reward, done, info = env.step("3!5 Score: 0")
    assert (obs, reward, done, info["components"]["correct"]) == (None, 1.0, True, 1.0)
    env.reset(task)
    env.step("Score: 1")  # a verdict in the first turn earns nothing, and is not read
    assert env.step("345= Score: 1")[1:3] == (0.0, True)


def test_unknown_scored_mode_is_named():
    with pytest.raises(ValueError, match="scored must be one of"):
        SimulatedUserEnv(scored="first")
