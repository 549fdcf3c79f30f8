"""A verifiers environment package, written only against ``verifiers.v1`` (no rlxf imports), as one from
the Environments Hub would be: a taskset of sums, a reward function, and a harness.

``turns=1``: single-turn (ask, answer). ``turns=2``: the harness is a multi-turn chat program: after the
first reply it asks the model to check its answer, and the last reply is scored. The harness runs its
loop in-process (``Harness.launch``'s documented alternative to a program): every model call goes through
verifiers' interception server at ``endpoint`` with ``secret``, so the traces record it.
``explode``: the reward function raises; ``crash``: the harness fails after its first model call.
"""

import re

import httpx
import verifiers.v1 as vf
from openai import AsyncOpenAI

CHECK = "Check it: "


class SumData(vf.TaskData):
    answer: str = ""
    turns: int = 1
    explode: bool = False
    crash: bool = False


class SumTask(vf.Task[SumData, vf.State, vf.TaskConfig]):
    @vf.reward
    async def correct(self, task, trace) -> float:
        if task.explode:
            raise ValueError("the reward's own bug")
        return score_reply(str(trace.messages[-1].content or ""), task.answer)

    @vf.metric
    async def reply_chars(self, task, trace) -> float:
        return float(len(str(trace.messages[-1].content or "")))


def score_reply(reply: str, answer: str) -> float:
    """The environment's scoring of one completion (the tests call it on the decoded tokens too): the reply's
    first number is the sum ("8", "8.", "= 8"; not "3 plus 5 is 8")."""
    first = re.search(r"-?\d+", reply)
    return 1.0 if first is not None and first.group() == answer else 0.0


class SumsConfig(vf.TasksetConfig):
    size: int = 12
    turns: int = 1
    explode: bool = False
    crash: bool = False


class SumsTaskset(vf.Taskset[SumTask, SumsConfig]):
    def load(self):
        c = self.config
        for i in range(c.size):
            a, b = i % 10, (7 * i // 10 + i) % 10
            data = SumData(id=f"sum-{i}", prompt=f"What is {a} plus {b}? Reply with the number only.", answer=str(a + b), turns=c.turns,
                           explode=c.explode, crash=c.crash)
            yield SumTask(data, c.task)


class ChatHarness(vf.Harness[vf.HarnessConfig]):
    NEEDS_CONTAINER = False
    EXECUTES_CODE = False
    APPENDS_SYSTEM_PROMPT = True

    async def launch(self, ctx, trace, runtime, endpoint, secret, mcp_urls, data, **kwargs):
        messages = [{"role": "user", "content": data.prompt}]
        # a held-out pass opens ~100 episodes at once on a loaded machine: the SDK's 5 s connect timeout (no retry)
        # failed some of them, so connect gets a minute and a failed request two more tries
        timeout = httpx.Timeout(600.0, connect=60.0)
        async with AsyncOpenAI(base_url=endpoint, api_key=secret, max_retries=2, timeout=timeout) as client:
            for turn in range(data.turns):
                reply = await client.chat.completions.create(model=ctx.model, messages=messages, max_tokens=16)
                if data.crash:
                    raise RuntimeError("the harness's own bug")
                messages.append({"role": "assistant", "content": reply.choices[0].message.content or ""})
                if turn + 1 < data.turns:
                    messages.append({"role": "user", "content": CHECK + data.prompt})
        return vf.ProgramResult(exit_code=0, stdout="", stderr="")


__all__ = ["SumsTaskset", "ChatHarness"]
