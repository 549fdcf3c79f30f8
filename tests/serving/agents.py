"""Agent programs for the endpoint tests, written only against the ``openai`` client (no rlxf imports)."""

import json
import sys
import threading

CALCULATOR = {"type": "function", "function": {
    "name": "calculator", "description": "evaluate an arithmetic expression",
    "parameters": {"type": "object", "properties": {"expression": {"type": "string"}}, "required": ["expression"]}}}
SEEN: dict[str, list] = {}  # task id -> what the agent saw, for the tests to compare
BARRIER: dict[str, threading.Barrier] = {}
RELEASE = threading.Event()


def tool_loop(client, task):
    """Offer the calculator, run the calls the policy makes, return the final answer."""
    messages = [{"role": "user", "content": task["prompt"]}]
    seen = SEEN.setdefault(task["id"], [])
    for _ in range(4):
        reply = client.chat.completions.create(model="policy", messages=messages, tools=[CALCULATOR])
        message = reply.choices[0].message
        seen.append((reply.choices[0].finish_reason, message.content,
                     [(c.function.name, json.loads(c.function.arguments)) for c in message.tool_calls or []]))
        messages.append(message.model_dump(exclude_none=True))
        if not message.tool_calls:
            return message.content or ""
        for call in message.tool_calls:
            expression = json.loads(call.function.arguments)["expression"]
            messages.append({"role": "tool", "tool_call_id": call.id, "content": str(eval(expression))})
    return ""


def chatty(client, task):
    """Two user turns, in step with the other agents of the test (a barrier), then the reply texts."""
    BARRIER[task["barrier"]].wait(10)
    messages, said = [{"role": "user", "content": task["prompt"]}], []
    for follow_up in ("+1=", "*2="):
        text = client.chat.completions.create(model="policy", messages=messages).choices[0].message.content or ""
        said.append(text)
        messages += [{"role": "assistant", "content": text}, {"role": "user", "content": follow_up}]
    SEEN[client.api_key.split("-")[1]] = said  # the key is rlxf-<session>-<secret>
    return {"reward": float(len(said)), "components": {"said": float(len("".join(said)))}}


def crash_after_one(client, task):
    client.chat.completions.create(model="policy", messages=[{"role": "user", "content": task["prompt"]}])
    raise RuntimeError("the agent's own bug")


def hang_after_one(client, task):
    client.chat.completions.create(model="policy", messages=[{"role": "user", "content": task["prompt"]}])
    RELEASE.wait(60)  # released by the test once it has its batch
    try:  # its session is over by now: refused
        client.chat.completions.create(model="policy", messages=[{"role": "user", "content": task["prompt"]}])
    except Exception as err:  # noqa: BLE001
        SEEN[task["id"]] = [str(err)]
    return "1"


def edit_history(client, task):
    """Turn 1, then send it back with the policy's reply changed: a history mismatch."""
    messages = [{"role": "user", "content": task["prompt"]}]
    first = client.chat.completions.create(model="policy", messages=messages).choices[0].message.content
    messages += [{"role": "assistant", "content": "9"}, {"role": "user", "content": "+1="}]
    second = client.chat.completions.create(model="policy", messages=messages).choices[0].message.content
    SEEN[task["id"]] = [first, second]
    return second


def completions(client, task):
    """The legacy completions API: the agent appends the policy's text and the tool result itself."""
    first = client.completions.create(model="policy", prompt=task["prompt"]).choices[0].text
    second = client.completions.create(model="policy", prompt=task["prompt"] + first + "=6\n").choices[0].text
    SEEN[task["id"]] = [first, second]
    return second


async def async_tool_loop(client, task):
    """``tool_loop`` on an ``openai.AsyncOpenAI`` client."""
    messages = [{"role": "user", "content": task["prompt"]}]
    for _ in range(4):
        message = (await client.chat.completions.create(model="policy", messages=messages, tools=[CALCULATOR])).choices[0].message
        messages.append(message.model_dump(exclude_none=True))
        if not message.tool_calls:
            return message.content or ""
        for call in message.tool_calls:
            value = str(eval(json.loads(call.function.arguments)["expression"]))
            messages.append({"role": "tool", "tool_call_id": call.id, "content": value})
    return ""


async def async_hang(client, task):
    import asyncio

    await client.chat.completions.create(model="policy", messages=[{"role": "user", "content": task["prompt"]}])
    try:
        await asyncio.sleep(60)
    except asyncio.CancelledError:
        SEEN[task["id"]] = ["cancelled"]
        raise


def wrong_result(client, task):
    client.chat.completions.create(model="policy", messages=[{"role": "user", "content": task["prompt"]}])
    return [1, 2]


if __name__ == "__main__":  # the subprocess agent: OPENAI_BASE_URL / OPENAI_API_KEY from the environment
    import openai

    task = json.load(sys.stdin)
    if task.get("mode") == "hang":
        threading.Event().wait(60)
    answer = tool_loop(openai.OpenAI(max_retries=0), task)
    if task.get("mode") == "crash":
        sys.exit(3)
    print("some log line")
    print(json.dumps({"answer": answer}))
