"""The reward server behind ``rlxf serve-reward``: any configured reward behind ``POST /score``, on an
ASGI stack (FastAPI + uvicorn: ``pip install 'rlxf[serve]'``).

Request ``{"prompts": [...], "responses": [...], "metadata": [{...}, ...]}`` (metadata optional); reply
``{"scores": [...], "components": {name: [...]}}``; failures are ``{"error": "..."}`` with status
400 (malformed request, lengths that disagree, a sample's metadata missing a field the reward reads or
holding one it cannot parse: ``server_rows.py``), 401 (token), 413 (body or batch past the limits),
500 (the reward raised on well-formed input), 504 (the reward ran past the per-request timeout). ``GET /health`` answers
``{"ok": true, "reward": NAME}`` (no token), ``GET /metrics`` the counters of ``server_metrics.py``,
``GET /openapi.json`` the schema. Concurrent small requests are merged into fewer reward calls
(``server_batching.py``). It binds to 127.0.0.1 unless told otherwise, and refuses another address
without a token. Stopping (Ctrl-C, SIGTERM) lets in-flight requests finish first.
"""

# No `from __future__ import annotations`: FastAPI reads the route signatures' types at run time.
import asyncio
import contextlib
import json
import os
import socket
import threading
from dataclasses import dataclass
from typing import Any

from pydantic import BaseModel, Field, model_validator

from rlxf.errors import MissingPackageError
from rlxf.rewards.base import Reward, RewardOutput, call_reward
from rlxf.rewards.server_batching import MicroBatcher
from rlxf.rewards.server_guard import BodyLimitMiddleware, check_bind, token_matches
from rlxf.rewards.server_metrics import MetricsMiddleware, ServerMetrics
from rlxf.rewards.server_rows import MissingField, field_problem, sample_rows
from rlxf.serving.ports import bound_socket

DEFAULT_TOKEN_ENV = "RLXF_REWARD_TOKEN"


@dataclass
class ServerSettings:
    # Generous defaults: a trainer sends a whole step (e.g. 512 prompts x 16 samples of long reasoning).
    max_body_bytes: int = 256 * 2**20  # 413 past this
    max_batch: int = 16384  # samples per request; 413 past this (merged calls stay within it too)
    timeout_seconds: float = 300.0  # per request; 504 past it
    workers: int = 4  # reward calls at once
    merge_requests: bool = True  # batch concurrent small requests into one reward call
    token: str | None = None  # required as 'Authorization: Bearer <token>' when set
    graceful_seconds: float = 30.0  # on shutdown, how long in-flight requests may still take


def _error(status: int, message: str):
    from fastapi.responses import JSONResponse

    return JSONResponse({"error": message}, status_code=status)


class ScoreRequest(BaseModel):
    prompts: list[str] = Field(description="one prompt per response")
    responses: list[str]
    metadata: list[dict[str, Any]] | None = Field(None, description="one dict per response (the dataset row)")

    @model_validator(mode="after")
    def same_lengths(self):
        n = len(self.responses)
        if len(self.prompts) != n:
            raise ValueError(f"{len(self.prompts)} prompts for {n} responses: send one prompt per response")
        if self.metadata is not None and len(self.metadata) != n:
            raise ValueError(f"{len(self.metadata)} metadata entries for {n} responses: send one dict per "
                             "response (or none)")
        return self


class ScoreReply(BaseModel):
    scores: list[float]
    components: dict[str, list[float]]


def _describe(errors: list[dict]) -> str:
    parts = []
    for err in errors[:5]:
        where = ".".join(str(p) for p in err.get("loc", ()) if p != "body")
        parts.append(f"{where}: {err.get('msg')}" if where else str(err.get("msg")))
    return "bad request: " + "; ".join(parts) + (f" (+{len(errors) - 5} more)" if len(errors) > 5 else "")


def require_serve_extra() -> None:
    try:
        import fastapi  # noqa: F401
        import uvicorn  # noqa: F401
    except ImportError as err:
        raise MissingPackageError(f"the reward server needs FastAPI and uvicorn ({err.name} is missing): "
                          "pip install 'rlxf[serve]'") from None


def build_app(reward: Reward, name: str, settings: ServerSettings | None = None):
    """The ASGI application (FastAPI) serving ``reward`` under ``name``."""
    require_serve_extra()
    from fastapi import FastAPI, Request
    from fastapi.exceptions import RequestValidationError
    from fastapi.responses import Response

    settings = settings or ServerSettings()
    metrics = ServerMetrics()
    batcher = MicroBatcher(
        lambda p, r, m: call_reward(reward, p, r, m, name), settings.workers, settings.max_batch,
        merge=settings.merge_requests and not getattr(reward, "batch_dependent", False), on_call=metrics.scored_batch,
    )

    @contextlib.asynccontextmanager
    async def lifespan(app):
        batcher.start()
        yield
        await batcher.stop()
        close = getattr(reward, "close", None)
        if callable(close):
            close()

    app = FastAPI(title=f"rlxf reward server ({name})", lifespan=lifespan,
                  description="Scores trajectories with the configured reward.")

    @app.exception_handler(RequestValidationError)
    async def bad_request(request: Request, err: RequestValidationError):
        return _error(400, _describe(err.errors()))

    def refused(request: Request):
        if settings.token and not token_matches(request.headers.get("authorization"), settings.token):
            return _error(401, "missing or wrong token: send 'Authorization: Bearer <token>'")
        return None

    @app.get("/health")
    async def health() -> dict:
        return {"ok": True, "reward": name}

    @app.get("/metrics")
    async def server_metrics(request: Request):
        return refused(request) or {"reward": name, **metrics.snapshot(), "queued": len(batcher.pending)}

    @app.post("/score", response_model=ScoreReply, responses={
        400: {"description": "malformed request, or a sample's metadata missing a field the reward needs"}, 401: {"description": "missing or wrong token"},
        413: {"description": "body or batch too large"}, 500: {"description": "the reward raised"},
        504: {"description": "the reward did not finish in time"}})
    async def score(body: ScoreRequest, request: Request):
        if (denied := refused(request)) is not None:
            return denied
        n = len(body.responses)
        if n > settings.max_batch:
            return _error(413, f"batch of {n} responses exceeds the server's limit of {settings.max_batch} (--max-batch); "
                               "split it on the client: reward `parallel` with executor: thread and chunk_size")
        metadata = sample_rows(body.metadata if body.metadata is not None else [{} for _ in range(n)])
        if (problem := field_problem(reward, metadata)) is not None:
            return _error(400, f"{problem}, which reward {name!r} needs")
        try:
            out: RewardOutput = await asyncio.wait_for(
                batcher.submit(body.prompts, body.responses, metadata), settings.timeout_seconds)
        except asyncio.TimeoutError:
            return _error(504, f"reward {name!r} did not finish within {settings.timeout_seconds}s (--timeout) "
                               f"on a batch of {n} responses")
        except MissingField as err:  # the reward read a field the client did not send: the client's mistake
            return _error(400, f"{err}, which reward {name!r} reads")
        except Exception as err:  # noqa: BLE001 - the client gets the failure, the server lives on
            return _error(500, f"reward {name!r} raised {type(err).__name__}: {err}")
        request.state.samples = n
        # json.dumps, not the stock response: NaN scores travel as they did with the stdlib server.
        return Response(json.dumps({"scores": out.scores, "components": out.components}),
                        media_type="application/json")

    app.add_middleware(BodyLimitMiddleware, max_bytes=settings.max_body_bytes)
    app.add_middleware(MetricsMiddleware, metrics=metrics, path="/score")
    return app


def uvicorn_server(app, settings: ServerSettings):
    import uvicorn

    config = uvicorn.Config(app, log_level="warning", lifespan="on", access_log=False,
                            timeout_graceful_shutdown=settings.graceful_seconds)
    return uvicorn.Server(config)


def start_on_thread(server, sock: socket.socket, thread_name: str, failure: str) -> threading.Thread:
    """Run a uvicorn ``server`` on ``sock`` in a daemon thread; return once it accepts connections, or
    raise ``failure`` if the thread ends first."""
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, name=thread_name, daemon=True)
    thread.start()
    while not server.started:
        if not thread.is_alive():
            raise RuntimeError(failure)
        thread.join(0.01)
    return thread


class RunningServer:
    """A server on a background thread (tests, benchmarks, notebooks): ``.url``, then ``.stop()``."""

    def __init__(self, app, host: str, port: int, settings: ServerSettings) -> None:
        self.sock = bound_socket(host, port)
        bound_host, self.port = self.sock.getsockname()[:2]
        self.url = f"http://{'[' + bound_host + ']' if ':' in bound_host else bound_host}:{self.port}"
        self.server = uvicorn_server(app, settings)
        self.thread = start_on_thread(self.server, self.sock, "reward-server",
                                      "the reward server failed to start (see the log above)")

    def stop(self) -> None:
        """Graceful: stop accepting, let in-flight requests finish, run the shutdown."""
        self.server.should_exit = True
        self.thread.join()
        self.sock.close()


def start_reward_server(
    reward: Reward, name: str, host: str = "127.0.0.1", port: int = 0, settings: ServerSettings | None = None,
) -> RunningServer:
    settings = settings or ServerSettings()
    check_bind(host, settings.token, DEFAULT_TOKEN_ENV)
    return RunningServer(build_app(reward, name, settings), host, port, settings)


def serve(reward: Reward, name: str, host: str, port: int, settings: ServerSettings,
          announce=lambda line: print(line, flush=True)) -> None:
    """Serve in the foreground until SIGINT/SIGTERM (then gracefully); ``port=0`` picks a free one."""
    check_bind(host, settings.token, DEFAULT_TOKEN_ENV)
    sock = bound_socket(host, port)
    server = uvicorn_server(build_app(reward, name, settings), settings)
    announce(f"serving reward {name!r} on http://{host}:{sock.getsockname()[1]} "
             "(POST /score, GET /health, GET /metrics, GET /docs)")
    try:
        server.run(sockets=[sock])
    finally:
        sock.close()


def token_from_env(env: str = DEFAULT_TOKEN_ENV) -> str | None:
    return os.environ.get(env) or None
