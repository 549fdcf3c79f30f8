"""An OpenEnv environment (``openenv-core``): a server with ``reset``/``step``, driven through its own client.

    env:
      name: openenv
      kwargs:
        app: my_env.server.app:app        # rlxf starts it on loopback (or url: http://host:8000, started by you)
        client: my_env.client:MyEnv       # its typed EnvClient (default: openenv's GenericEnvClient)
        action: my_env.models:MyAction    # its Action type (default: a plain dict)
        action_field: message             # the action's field that gets the policy's text
        observation_field: echoed_message # the observation's field that becomes the next message

One episode per trajectory, driven as TRL's ``environment_factory`` drives one, with the policy behind rlxf's
OpenAI-compatible endpoint (``serving/``, ``roles/agent_rollout.py``: the tokens trained are the tokens
sampled, the observations between the policy's turns masked, the chat format renders the messages):
``reset`` (its keyword arguments from the row: ``reset_keys: [seed]``, or ``{seed: answer}`` for reset's
``seed`` from the row's ``answer``) gives the first observation, which is the first user message; each
policy reply becomes the action — ``action_format: text`` puts its text in ``action_field``; ``tool``
offers the action type as a function (its JSON schema) and a call's arguments become the action's fields
(a reply without a call is still sent, as text in ``action_field``) — the observation's
``observation_field`` (default: its first text field) becomes the next message (a tool result after a
call), and the reward of each step is what the environment returns, credited to that turn. The episode ends
when the environment says ``done`` or at ``env.max_turns`` / ``env.max_total_tokens``. Components:
``openenv_reward`` (the episode's sum) and ``openenv_done`` (1 when the environment ended it).
``package_dir``: a folder of environment packages that are not installed (a checkout), put on ``sys.path``
here and in the server's.

A call that fails (the server died, hung past ``step_timeout_s``, or dropped the connection) is retried
``retries`` times: a server rlxf started is restarted if it died, the episode is reconnected and replayed
(reset with the same arguments, then the same actions, which a deterministic environment answers alike);
after that the run stops with one ``rlxf:`` line naming the server and the failure.
"""

from __future__ import annotations

import asyncio
import json
from typing import Any

from rlxf.config_error import ConfigError
from rlxf.envs.base import ENVS
from rlxf.envs.openai_agent import AgentFailure, AgentOutcome, OpenAIAgentEnv, _openai
from rlxf.envs.openenv_server import OpenEnvServerError, local_server
from rlxf.errors import MissingPackageError
from rlxf.serving.chat_format import CHAT_FORMATS

INSTALL = "pip install 'rlxf[openenv]'"


def import_openenv():
    try:
        from openenv.core import GenericEnvClient
    except ImportError:
        raise MissingPackageError(f"the openenv environment needs openenv-core: {INSTALL}") from None
    return GenericEnvClient


def _import(dotted: str, key: str):
    from rlxf.rewards.registry import import_object

    try:
        return import_object(dotted)
    except ValueError as err:
        raise ConfigError(f"env.kwargs.{key}: {err}") from None


def observation_text(observation: Any, field: str | None) -> str:
    data = observation.model_dump() if hasattr(observation, "model_dump") else dict(observation or {})
    if field is not None:
        return "" if data.get(field) is None else str(data[field])
    texts = [v for k, v in data.items() if isinstance(v, str)]
    return texts[0] if texts else ""


class Connection:
    """One episode's session with the server: its calls retried on a fresh connection, replaying the episode."""

    def __init__(self, env: OpenEnvEnv, reset_kwargs: dict[str, Any]) -> None:
        self.env, self.reset_kwargs = env, reset_kwargs
        self.client = None
        self.actions: list[Any] = []

    async def _replay(self, actions: list[Any]):
        await self.close()
        env = self.env
        self.client = env.client_cls(base_url=env.server_url(), message_timeout_s=env.step_timeout_s)
        result = await asyncio.wait_for(self.client.reset(**self.reset_kwargs), env.step_timeout_s)
        for action in actions:
            result = await asyncio.wait_for(self.client.step(action), env.step_timeout_s)
        return result

    async def call(self, what: str, action: Any = None):
        env, failure = self.env, ""
        for attempt in range(env.retries + 1):
            try:
                if what == "step" and attempt == 0:
                    result = await asyncio.wait_for(self.client.step(action), env.step_timeout_s)
                else:  # reset, or a retry: the episode so far on a new connection
                    result = await self._replay(self.actions + ([action] if what == "step" else []))
                if what == "step":
                    self.actions.append(action)
                return result
            except OpenEnvServerError:
                raise
            except (asyncio.TimeoutError, TimeoutError):
                failure = f"no answer to {what} within step_timeout_s={env.step_timeout_s}"
            except Exception as err:  # noqa: BLE001 - a dropped connection, a server error: retried
                failure = f"{what} failed: {type(err).__name__}: {err}"[:300]
        tail = f"; its output ends: {env.server.last_line()}" if env.server is not None else ""
        raise OpenEnvServerError(f"OpenEnv server {env.name!r}: {failure} ({env.retries + 1} tries){tail}")

    async def close(self) -> None:
        if self.client is not None:
            client, self.client = self.client, None
            try:
                await client.close()
            except Exception:  # noqa: BLE001 - a connection already gone
                pass


@ENVS.register("openenv")
class OpenEnvEnv(OpenAIAgentEnv):
    """Settings of the adapter; it drives its own rollout (``roles/agent_rollout.py``)."""

    def __init__(
        self, app: str | None = None, url: str | None = None, client: str | None = None, action: str | None = None,
        action_field: str = "message", action_format: str = "text", observation_field: str | None = None,
        reset_keys: list[str] | dict[str, str] | None = None, package_dir: str | None = None,
        start_timeout_s: float = 60.0, step_timeout_s: float = 60.0, retries: int = 2, timeout_s: float = 600.0,
        max_concurrent: int = 64, chat_format: str = "plain", format_kwargs: dict[str, Any] | None = None,
        max_wait_s: float = 0.02, host: str = "127.0.0.1",
    ) -> None:
        if (app is None) == (url is None):
            raise ConfigError("env openenv needs exactly one of env.kwargs.app (module:app, started by rlxf) or env.kwargs.url")
        if action_format not in ("text", "tool"):
            raise ConfigError(f"env.kwargs.action_format {action_format!r} is not one of text, tool")
        if retries < 0 or step_timeout_s <= 0 or timeout_s <= 0 or max_concurrent < 1:
            raise ConfigError("env openenv needs env.kwargs.retries >= 0, step_timeout_s > 0, timeout_s > 0 and "
                              f"max_concurrent >= 1, got {retries}, {step_timeout_s}, {timeout_s}, {max_concurrent}")
        if chat_format not in CHAT_FORMATS.names():
            raise ConfigError(f"env.kwargs.chat_format {chat_format!r} is not one of {', '.join(CHAT_FORMATS.names())}")
        if package_dir:  # a folder of environment packages that are not installed (a checkout)
            from rlxf.data.verifiers_tasks import on_path

            on_path(package_dir)
        generic = import_openenv()  # a recipe naming it without the package: one line, the install command
        self.client_cls = _import(client, "client") if client else generic
        self.action_cls = _import(action, "action") if action else None
        self.server = local_server(app, host, start_timeout_s) if app else None
        self.name, self.fixed_url = app or url, url
        self.action_field, self.action_format, self.observation_field = action_field, action_format, observation_field
        keys = reset_keys or []  # reset's keyword -> the row's field (a list: the same names)
        self.reset_keys = dict(keys) if isinstance(keys, dict) else {k: k for k in keys}
        self.step_timeout_s, self.retries, self.timeout_s = step_timeout_s, retries, timeout_s
        self.format_name, self.format_kwargs = chat_format, dict(format_kwargs or {})
        self.max_concurrent, self.max_wait_s, self.host = max_concurrent, max_wait_s, host

    def server_url(self) -> str:
        if self.server is None:
            return self.fixed_url
        try:
            return self.server.ensure()  # started on first use; started again when it has died
        except OpenEnvServerError:
            raise
        except Exception as err:  # noqa: BLE001 - named, one line
            raise OpenEnvServerError(f"OpenEnv server {self.name!r} could not start: {type(err).__name__}: {err}") from None

    def shared_http(self) -> None:
        return None

    def tools(self) -> list[dict] | None:
        if self.action_format != "tool":
            return None
        schema = (self.action_cls.model_json_schema() if self.action_cls is not None
                  else {"type": "object", "properties": {self.action_field: {"type": "string"}}})
        schema = {k: v for k, v in schema.items() if k in ("type", "properties", "required")}
        schema["properties"] = {k: v for k, v in schema.get("properties", {}).items() if k != "metadata"}
        name = self.action_cls.__name__ if self.action_cls is not None else "act"
        return [{"type": "function", "function": {"name": name, "description": "act in the environment",
                                                  "parameters": schema}}]

    def action(self, message) -> Any:
        """The policy's reply -> the environment's action: a tool call's arguments, else its text."""
        fields = {self.action_field: message.content or ""}
        calls = message.tool_calls or []
        if calls:
            try:
                parsed = json.loads(calls[0].function.arguments or "{}")
                fields = parsed if isinstance(parsed, dict) else fields
            except json.JSONDecodeError:
                pass
        if self.action_cls is None:
            return fields
        try:
            return self.action_cls(**fields)
        except Exception:  # noqa: BLE001 - a malformed call: sent as the text of the reply, the environment judges
            return self.action_cls(**{self.action_field: message.content or ""})

    async def run(self, base_url: str, api_key: str, task: dict, http=None) -> AgentOutcome:
        """One episode; the policy's side failing (its endpoint session refused, the episode past ``timeout_s``)
        is a failed trajectory, the server's failing after its retries stops the run (``OpenEnvServerError``)."""
        try:
            return await asyncio.wait_for(self._episode(base_url, api_key, task), self.timeout_s)
        except OpenEnvServerError:
            raise
        except asyncio.TimeoutError:
            return AgentOutcome(0.0, {}, AgentFailure(
                "timeout", f"OpenEnv episode on {self.name} still running after timeout_s={self.timeout_s}"))
        except Exception as err:  # noqa: BLE001 - counted as a failed trajectory, the reason kept
            return AgentOutcome(0.0, {}, AgentFailure("error", f"OpenEnv episode on {self.name}: {type(err).__name__}: {err}"[:400]))

    async def _episode(self, base_url: str, api_key: str, task: dict) -> AgentOutcome:
        connection = Connection(self, {k: task[field] for k, field in self.reset_keys.items() if field in task})
        rewards, done = [], False
        openai = _openai()
        try:
            result = await connection.call("reset")
            messages = [{"role": "user", "content": observation_text(result.observation, self.observation_field)}]
            tools = self.tools()
            async with openai.AsyncOpenAI(base_url=base_url, api_key=api_key, max_retries=0, timeout=self.timeout_s) as llm:
                while not done:
                    reply = await llm.chat.completions.create(model="policy", messages=messages,
                                                              **({"tools": tools} if tools else {}))
                    if reply.usage is not None and reply.usage.completion_tokens == 0:
                        break  # env.max_turns or env.max_total_tokens: the session has no room for another turn
                    message = reply.choices[0].message
                    result = await connection.call("step", self.action(message))
                    rewards.append(float(result.reward or 0.0))
                    done = bool(result.done)
                    text = observation_text(result.observation, self.observation_field)
                    messages.append(message.model_dump(exclude_none=True))
                    calls = message.tool_calls or []
                    messages.append({"role": "tool", "tool_call_id": calls[0].id, "content": text} if calls
                                    else {"role": "user", "content": text})
        finally:
            await connection.close()
        total = float(sum(rewards))
        return AgentOutcome(total, {"openenv_reward": total, "openenv_done": float(done)}, turn_rewards=rewards)
