"""An OpenAI-compatible endpoint over the policy being trained (FastAPI + uvicorn, on a background thread).

Routes, per session (``base_url = <server>/sessions/<id>/v1``, the session's key as the API key):

    GET  /sessions/<id>/v1/models            the one model, ``policy``
    POST /sessions/<id>/v1/chat/completions  messages (+ ``tools``, OpenAI function calling) -> a reply
    POST /sessions/<id>/v1/completions       ``prompt`` (text or token ids) -> a completion

The same routes under plain ``/v1/...`` find the session by its API key alone. A request without the
session's key is refused (401), so concurrent agents cannot write into each other's trajectories; a
request to a finished or timed-out session gets 410. Errors come back in OpenAI's error shape, their
message starting ``rlxf:``, so the client raises with it. Only ``n: 1`` and no streaming; the sampling
arguments of the request (temperature, top_p, seed, ...) are ignored: the rollout's own apply, since the
trainer's log-probs assume them. ``max_tokens`` / ``max_completion_tokens`` lower the turn's budget.

What each session recorded (``session.py``) becomes the trajectory; nothing the policy said is re-tokenized.
"""

# No `from __future__ import annotations`: FastAPI reads the route signatures' types at run time.
import asyncio
import contextlib
import secrets
import threading
import time

from rlxf.errors import MissingPackageError
from rlxf.rollout.stops import stop_id_list
from rlxf.serving.batcher import GenerationBatcher
from rlxf.serving.chat_format import ChatFormat
from rlxf.serving.session import Budget, Session, SessionError

MODEL_NAME = "policy"


def _error(status: int, message: str, kind: str = "invalid_request_error"):
    from fastapi.responses import JSONResponse

    return JSONResponse({"error": {"message": f"rlxf: {message}", "type": kind, "param": None, "code": None}},
                        status_code=status)


class Endpoint:
    """Sessions + the batcher; ``build_app`` serves them. Sessions are opened and closed from any thread."""

    def __init__(self, engine, tokenizer, chat_format: ChatFormat, max_batch: int = 256, max_wait_s: float = 0.02) -> None:
        self.tokenizer, self.format = tokenizer, chat_format
        self.stop_ids = set(stop_id_list(getattr(engine, "eos_id", tokenizer.eos_token_id)))
        self.batcher = GenerationBatcher(engine, max_batch, max_wait_s, expected=self.running)
        self.sessions: dict[str, Session] = {}
        self.by_key: dict[str, str] = {}
        self.locks: dict[str, asyncio.Lock] = {}
        self.loop: asyncio.AbstractEventLoop | None = None
        self.url = ""

    def open_session(self, budget: Budget) -> Session:
        sid = secrets.token_hex(6)
        session = Session(sid, f"rlxf-{sid}-{secrets.token_hex(8)}", self.format, self.tokenizer, budget)
        self.sessions[sid] = session
        self.by_key[session.key] = sid
        return session

    def running(self) -> int:
        """Sessions whose agent runs now: the requests worth waiting for before a batch."""
        return sum(s.running and not s.closed for s in list(self.sessions.values()))

    def base_url(self, session: Session) -> str:
        return f"{self.url}/sessions/{session.sid}/v1"

    def close_session(self, session: Session) -> None:
        """Refuse its later requests, from the server's own loop so no reply is being recorded meanwhile."""
        def close() -> None:
            session.closed = True
            self.batcher.poke()

        if self.loop is not None and self.loop.is_running():
            done = threading.Event()
            self.loop.call_soon_threadsafe(lambda: (close(), done.set()))
            done.wait(5)
        session.closed = True

    def forget(self, session: Session) -> None:
        self.sessions.pop(session.sid, None)
        self.by_key.pop(session.key, None)
        self.locks.pop(session.sid, None)

    def find(self, sid: str | None, authorization: str | None) -> Session | str:
        key = (authorization or "").removeprefix("Bearer ").strip()
        if sid is None:
            sid = self.by_key.get(key)
            if sid is None:
                return "no session has this API key (use the key and base URL rlxf gave the agent)"
        session = self.sessions.get(sid)
        if session is None:
            return f"no session {sid!r}"
        if not secrets.compare_digest(key, session.key):
            return f"wrong API key for session {sid!r}"
        return session


def _completion_limit(body: dict) -> int | None:
    limit = body.get("max_completion_tokens") or body.get("max_tokens")
    if limit is not None and (not isinstance(limit, int) or limit < 1):
        raise SessionError(f"max_tokens must be a positive integer, got {limit!r}")
    return limit


def _check_common(body: dict) -> None:
    if body.get("stream"):
        raise SessionError("streaming is not supported by the training endpoint; send stream=false")
    if body.get("n", 1) != 1:
        raise SessionError(f"n must be 1 (one sampled reply per request), got {body.get('n')!r}")


def build_app(endpoint: Endpoint):
    from fastapi import FastAPI, Request

    @contextlib.asynccontextmanager
    async def lifespan(app):
        endpoint.loop = asyncio.get_running_loop()
        endpoint.batcher.start()
        yield
        await endpoint.batcher.stop()

    app = FastAPI(title="rlxf policy endpoint (OpenAI-compatible)", lifespan=lifespan)

    async def body_of(request: Request) -> dict:
        try:
            body = await request.json()
        except ValueError:
            raise SessionError("the request body is not JSON") from None
        if not isinstance(body, dict):
            raise SessionError("the request body must be a JSON object")
        return body

    async def serve(request: Request, sid: str | None, answer):
        found = endpoint.find(sid, request.headers.get("authorization"))
        if isinstance(found, str):
            return _error(401, found, "authentication_error")
        if found.closed:
            return _error(410, f"session {found.sid!r} is over (the agent finished or ran past its timeout)")
        lock = endpoint.locks.setdefault(found.sid, asyncio.Lock())
        try:
            body = await body_of(request)
            _check_common(body)
            async with lock:  # one turn at a time per conversation
                found.requests += 1
                reply = await answer(found, body)
        except SessionError as err:
            return _error(400, str(err))
        if reply is None:
            return _error(410, f"session {found.sid!r} is over (the agent ran past its timeout)")
        return reply

    async def turn(session: Session, context: list[int], limit: int | None):
        room = session.room()
        got = await endpoint.batcher.generate(context, min(room, limit) if limit else room)
        return None if session.closed else got

    async def chat(session: Session, body: dict):
        messages, tools = body.get("messages"), body.get("tools") or None
        if not isinstance(messages, list):
            raise SessionError("messages must be a list of message objects")
        try:
            context = session.chat_context(messages, tools)
        except ValueError as err:
            raise SessionError(str(err)) from None
        got = await turn(session, context, _completion_limit(body))
        if got is None:
            return None
        text = endpoint.tokenizer.decode(got.ids, skip_special_tokens=True)
        if endpoint.format.special_tokens_in_text:  # a chat model's tool-call markers may be special tokens
            text = endpoint.tokenizer.decode([i for i in got.ids if i not in endpoint.stop_ids], skip_special_tokens=False)
        content, calls = endpoint.format.parse(text, tools if body.get("tool_choice") != "none" else None)
        tool_calls = [{"id": f"call_{session.sid}_{session.requests}_{k}", "type": "function", "function": call}
                      for k, call in enumerate(calls)]
        message = {"role": "assistant", "content": content, **({"tool_calls": tool_calls} if tool_calls else {})}
        session.record_turn(got.ids, got.log_probs, reply=message, stopped=got.stopped)
        finish = "tool_calls" if tool_calls else ("stop" if got.stopped else "length")
        return {"id": f"chatcmpl-{session.sid}-{session.requests}", "object": "chat.completion",
                "created": int(time.time()), "model": MODEL_NAME,
                "choices": [{"index": 0, "message": message, "finish_reason": finish, "logprobs": None}],
                "usage": _usage(len(context), len(got.ids))}

    async def complete(session: Session, body: dict):
        prompt = body.get("prompt")
        if isinstance(prompt, list) and len(prompt) == 1 and isinstance(prompt[0], (str, list)):
            prompt = prompt[0]
        ok = isinstance(prompt, str) or (isinstance(prompt, list) and all(isinstance(i, int) for i in prompt))
        if not ok:
            raise SessionError("prompt must be one text or one list of token ids")
        context = session.completion_context(prompt)
        got = await turn(session, context, _completion_limit(body))
        if got is None:
            return None
        text = endpoint.tokenizer.decode(got.ids, skip_special_tokens=True)
        session.record_turn(got.ids, got.log_probs, text=text, stopped=got.stopped)
        return {"id": f"cmpl-{session.sid}-{session.requests}", "object": "text_completion",
                "created": int(time.time()), "model": MODEL_NAME,
                "choices": [{"index": 0, "text": text, "finish_reason": "stop" if got.stopped else "length",
                             "logprobs": None}],
                "usage": _usage(len(context), len(got.ids))}

    def models(request: Request, sid: str | None):
        found = endpoint.find(sid, request.headers.get("authorization"))
        if isinstance(found, str):
            return _error(401, found, "authentication_error")
        return {"object": "list", "data": [{"id": MODEL_NAME, "object": "model", "created": 0, "owned_by": "rlxf"}]}

    @app.get("/health")
    async def health() -> dict:
        return {"ok": True, "sessions": len(endpoint.sessions)}

    # a session by its path (and key), or by its key alone
    async def models_by_path(request: Request, sid: str):
        return models(request, sid)

    async def models_by_key(request: Request):
        return models(request, None)

    async def chat_by_path(request: Request, sid: str):
        return await serve(request, sid, chat)

    async def chat_by_key(request: Request):
        return await serve(request, None, chat)

    async def completions_by_path(request: Request, sid: str):
        return await serve(request, sid, complete)

    async def completions_by_key(request: Request):
        return await serve(request, None, complete)

    for prefix, by in (("/sessions/{sid}/v1", "path"), ("/v1", "key")):
        handlers = {"models": (models_by_path, models_by_key), "chat": (chat_by_path, chat_by_key),
                    "completions": (completions_by_path, completions_by_key)}
        pick = 0 if by == "path" else 1
        app.add_api_route(f"{prefix}/models", handlers["models"][pick], methods=["GET"])
        app.add_api_route(f"{prefix}/chat/completions", handlers["chat"][pick], methods=["POST"])
        app.add_api_route(f"{prefix}/completions", handlers["completions"][pick], methods=["POST"])
    return app


def _usage(prompt: int, completion: int) -> dict:
    return {"prompt_tokens": prompt, "completion_tokens": completion, "total_tokens": prompt + completion}


class RunningEndpoint:
    """The endpoint's server on a daemon thread, bound to a free port of ``host``: ``.url``, ``.stop()``."""

    def __init__(self, endpoint: Endpoint, host: str = "127.0.0.1", port: int = 0) -> None:
        try:
            import uvicorn  # noqa: F401  (checked here: the message names the extra to install)
        except ImportError:
            raise MissingPackageError("the OpenAI-compatible endpoint needs FastAPI and uvicorn: pip install 'rlxf[serve]'") from None
        from rlxf.rewards.server import ServerSettings, bound_socket, start_on_thread, uvicorn_server

        self.endpoint = endpoint
        self.sock = bound_socket(host, port)
        endpoint.url = f"http://{host}:{self.sock.getsockname()[1]}"
        self.server = uvicorn_server(build_app(endpoint), ServerSettings(graceful_seconds=1))
        self.thread = start_on_thread(self.server, self.sock, "openai-endpoint",
                                      "rlxf: the OpenAI-compatible endpoint failed to start (see the log above)")

    @property
    def url(self) -> str:
        return self.endpoint.url

    def stop(self) -> None:
        self.server.should_exit = True
        self.thread.join(10)
        self.sock.close()
