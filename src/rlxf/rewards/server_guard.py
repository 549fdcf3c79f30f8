"""The reward server's gatekeeping: who may bind where, the bearer token, the request-body limit."""

from __future__ import annotations

import hmac
import ipaddress
import json

LOOPBACK_NAMES = {"localhost", "ip6-localhost"}


def is_loopback(host: str) -> bool:
    if host in LOOPBACK_NAMES:
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False  # a host name: assume it is reachable from elsewhere


def check_bind(host: str, token: str | None, token_env: str) -> None:
    """Refuse to listen beyond this machine without a token: anyone who can reach the port could score."""
    if not is_loopback(host) and not token:
        raise ValueError(
            f"serve-reward: binding {host!r} (not loopback) needs a token; set the environment variable "
            f"{token_env} (clients send it as 'Authorization: Bearer <token>', the remote reward via its token_env)"
        )


def token_matches(header: str | None, token: str) -> bool:
    scheme, _, given = (header or "").partition(" ")
    return scheme.lower() == "bearer" and hmac.compare_digest(given.strip().encode(), token.encode())


async def _reply(send, status: int, message: str) -> None:
    body = json.dumps({"error": message}).encode()
    await send({"type": "http.response.start", "status": status,
                "headers": [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())]})
    await send({"type": "http.response.body", "body": body})


class BodyLimitMiddleware:
    """413 for a request body past ``max_bytes``, checked on Content-Length and again while reading
    (a chunked body has none); the body is read here, bounded, and replayed to the app."""

    def __init__(self, app, max_bytes: int) -> None:
        self.app, self.max_bytes = app, max_bytes

    async def __call__(self, scope, receive, send) -> None:
        if scope["type"] != "http" or scope["method"] not in ("POST", "PUT", "PATCH"):
            return await self.app(scope, receive, send)
        too_big = (f"request body exceeds the server's limit of {self.max_bytes} bytes (--max-body-mb); split the "
                   "batch on the client: reward `parallel` with executor: thread and chunk_size")
        declared = dict(scope["headers"]).get(b"content-length")
        if declared is not None and declared.isdigit() and int(declared) > self.max_bytes:
            return await _reply(send, 413, too_big)
        chunks, size = [], 0
        while True:
            message = await receive()
            if message["type"] == "http.disconnect":
                return
            chunks.append(message.get("body", b""))
            size += len(chunks[-1])
            if size > self.max_bytes:
                return await _reply(send, 413, too_big)
            if not message.get("more_body", False):
                break
        body, replayed = b"".join(chunks), False

        async def replay():
            nonlocal replayed
            if replayed:
                return await receive()  # after the body: wait for the disconnect as usual
            replayed = True
            return {"type": "http.request", "body": body, "more_body": False}

        await self.app(scope, replay, send)
