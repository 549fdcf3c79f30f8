"""An OpenEnv environment (``openenv-core``): a server with ``reset``/``step``, driven through its own client.

    env:
      name: openenv
      kwargs:
        app: my_env.server.app:app        # rlxf starts it on loopback (or url: http://host:8000, started by you)
        client: my_env.client:MyEnv       # its typed EnvClient (default: openenv's GenericEnvClient)
        action: my_env.models:MyAction    # its Action type (default: a plain dict)
        action_field: message             # the action's field that gets the policy's text
        observation_field: echoed_message # the observation's field that becomes the next message

One episode per trajectory, in the multi-turn rollout (``roles/env_rollout.py``; token-in/token-out, the
observations masked; ``package_dir``: a folder of environment packages that are not installed, put on
``sys.path`` here and in the server's): ``reset`` (with the row's fields named by ``reset_keys`` as its keyword arguments: ``[seed]``, or
``{seed: answer}`` for reset's ``seed`` from the row's ``answer``)
gives the first observation, which is the prompt (or, when empty, the row's prompt); each policy turn,
decoded, becomes the action (``action_format: text`` puts it in ``action_field``; ``json`` parses it as
the action's fields: a tool call written as JSON); the observation's ``observation_field`` becomes the
next message; the reward of each step is what the environment returns; the episode ends when it says
``done`` or at ``env.max_turns``. The observation's numeric ``metadata`` and the episode's ``openenv_reward``
(the sum) are logged as components.

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
from rlxf.envs.base import ENVS, StepResult
from rlxf.envs.openenv_server import OpenEnvServerError, local_server

INSTALL = "pip install 'rlxf[openenv]'"


def import_openenv():
    try:
        from openenv.core import GenericEnvClient
    except ImportError:
        raise ConfigError(f"the openenv environment needs openenv-core: {INSTALL}") from None
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
    texts = [v for k, v in data.items() if isinstance(v, str) and k not in ("metadata",)]
    return texts[0] if texts else ""


def numeric_metadata(observation: Any) -> dict[str, float]:
    data = observation.model_dump() if hasattr(observation, "model_dump") else dict(observation or {})
    meta = data.get("metadata") or {}
    return {k: float(v) for k, v in meta.items() if isinstance(v, (int, float)) and not isinstance(v, bool)}


@ENVS.register("openenv")
class OpenEnvEnv:
    """One episode of an OpenEnv environment (one instance per trajectory)."""

    def __init__(
        self, app: str | None = None, url: str | None = None, client: str | None = None, action: str | None = None,
        action_field: str = "message", action_format: str = "text", observation_field: str | None = None,
        reset_keys: list[str] | dict[str, str] | None = None, host: str = "127.0.0.1", start_timeout_s: float = 60.0,
        step_timeout_s: float = 60.0, retries: int = 2, package_dir: str | None = None,
    ) -> None:
        if (app is None) == (url is None):
            raise ConfigError("env openenv needs exactly one of env.kwargs.app (module:app, started by rlxf) or env.kwargs.url")
        if action_format not in ("text", "json"):
            raise ConfigError(f"env.kwargs.action_format {action_format!r} is not one of text, json")
        if retries < 0 or step_timeout_s <= 0:
            raise ConfigError(f"env openenv needs env.kwargs.retries >= 0 and step_timeout_s > 0, got {retries}, {step_timeout_s}")
        if package_dir:  # a folder of environment packages that are not installed (a checkout)
            from rlxf.data.verifiers_tasks import on_path

            on_path(package_dir)
        generic = import_openenv()  # a recipe naming it without the package: one line, the install command
        self.client_cls = _import(client, "client") if client else generic
        self.action_cls = _import(action, "action") if action else None
        self.server = local_server(app, host, start_timeout_s) if app else None
        self.name = app or url
        self.fixed_url = url
        self.action_field, self.action_format, self.observation_field = action_field, action_format, observation_field
        keys = reset_keys or []  # reset's keyword -> the row's field (a list: the same names)
        self.reset_keys = dict(keys) if isinstance(keys, dict) else {k: k for k in keys}
        self.step_timeout_s, self.retries = step_timeout_s, retries
        self.client = None
        self.reset_kwargs: dict[str, Any] = {}
        self.actions: list[Any] = []
        self.total = 0.0

    def _url(self) -> str:
        if self.server is None:
            return self.fixed_url
        try:
            return self.server.ensure()
        except OpenEnvServerError:
            raise
        except Exception as err:  # noqa: BLE001 - named, one line
            raise OpenEnvServerError(f"OpenEnv server {self.name!r} could not start: {type(err).__name__}: {err}") from None

    async def _connect_and_replay(self):
        """A fresh connection (a restarted server if it died), reset, and the episode's actions so far again."""
        await self.close()
        self.client = self.client_cls(base_url=self._url(), message_timeout_s=self.step_timeout_s)
        result = await asyncio.wait_for(self.client.reset(**self.reset_kwargs), self.step_timeout_s)
        for action in self.actions:
            result = await asyncio.wait_for(self.client.step(action), self.step_timeout_s)
        return result

    async def _call(self, what: str, action: Any = None):
        failure = ""
        for attempt in range(self.retries + 1):
            try:
                if attempt == 0 and self.client is not None and action is not None:
                    return await asyncio.wait_for(self.client.step(action), self.step_timeout_s)
                if action is not None:
                    self.actions.append(action)  # replayed last by _connect_and_replay
                    try:
                        return await self._connect_and_replay()
                    finally:
                        self.actions.pop()
                return await self._connect_and_replay()
            except OpenEnvServerError:
                raise
            except (asyncio.TimeoutError, TimeoutError):
                failure = f"no answer to {what} within step_timeout_s={self.step_timeout_s}"
            except Exception as err:  # noqa: BLE001 - a dropped connection, a server error: retried
                failure = f"{what} failed: {type(err).__name__}: {err}"[:300]
            if self.server is not None and attempt < self.retries:
                self.server.restart() if not self.server.alive() else None
        tail = f"; its output ends: {self.server.last_line()}" if self.server is not None else ""
        raise OpenEnvServerError(f"OpenEnv server {self.name!r}: {failure} ({self.retries + 1} tries){tail}")

    def _action(self, text: str) -> Any:
        if self.action_format == "json":
            try:
                fields = json.loads(text)
            except json.JSONDecodeError:
                fields = None
            fields = fields if isinstance(fields, dict) else {self.action_field: text}
        else:
            fields = {self.action_field: text}
        if self.action_cls is None:
            return fields
        try:
            return self.action_cls(**fields)
        except Exception:  # noqa: BLE001 - a malformed call from the policy: sent as text, the environment judges
            return self.action_cls(**{self.action_field: text})

    async def reset(self, task: dict) -> str:
        self.reset_kwargs = {k: task[field] for k, field in self.reset_keys.items() if field in task}
        self.actions, self.total = [], 0.0
        result = await self._call("reset")
        return observation_text(result.observation, self.observation_field)

    async def step(self, action: str) -> StepResult:
        act = self._action(action)
        result = await self._call("step", act)
        self.actions.append(act)
        reward = float(result.reward or 0.0)
        self.total += reward
        components = {**numeric_metadata(result.observation), "openenv_reward": self.total}
        if result.done:
            await self.close()
        return observation_text(result.observation, self.observation_field), reward, bool(result.done), {"components": components}

    async def close(self) -> None:
        if self.client is not None:
            client, self.client = self.client, None
            try:
                await client.close()
            except Exception:  # noqa: BLE001 - a connection already gone
                pass
