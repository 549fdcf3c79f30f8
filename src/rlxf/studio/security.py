"""What keeps the studio safe to run: loopback by default, a token on any other bind, bounded bodies.

A request carries the token as ``Authorization: Bearer TOKEN``, as the cookie the studio sets, or once
as ``?token=TOKEN`` on a page (the answer then sets the cookie, so the links stay clean). Other sites'
pages cannot drive a studio through the visitor's browser: a change (POST) must be JSON (so a cross-site
request needs a CORS preflight, which the studio never grants) and, when it names an ``Origin``, come from
the studio's own; a loopback studio answers only requests addressed to a loopback name (no DNS
rebinding). Responses are
never built by pasting untrusted text into HTML: pages are static, the browser code writes model
outputs with ``textContent``; the Content-Security-Policy forbids inline scripts besides.
"""

from __future__ import annotations

import ipaddress
import json
import secrets
from urllib.parse import urlsplit

from starlette.middleware.base import BaseHTTPMiddleware
from starlette.requests import Request
from starlette.responses import JSONResponse

from rlxf.studio import limits
from rlxf.studio.limits import InputError

COOKIE = "rlxf_studio_token"
CSP = ("default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
       "object-src 'none'; base-uri 'none'; frame-ancestors 'none'")


def is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def token_for_bind(host: str, token: str | None) -> str | None:
    """The token the server will require: the given one, a fresh random one for a non-loopback bind
    without one, or None on loopback (only this machine's users can connect)."""
    if token:
        if len(token) < 16:
            raise InputError("--token must be at least 16 characters")
        return token
    return None if is_loopback(host) else secrets.token_urlsafe(24)


def cross_site_refusal(request: Request, loopback_only: bool) -> str | None:
    """Why ``request`` may come from another site's page (None when it may not)."""
    host = request.headers.get("host", "")
    if loopback_only and not is_loopback(urlsplit(f"//{host}").hostname or ""):
        return f"this studio serves only loopback addresses, not {host[:80]!r}"
    if request.method in ("GET", "HEAD", "OPTIONS"):
        return None
    if not request.headers.get("content-type", "").startswith("application/json"):
        return "a change must be sent as application/json"
    origin = request.headers.get("origin")
    if origin and urlsplit(origin).netloc != host:
        return f"a change from another site ({origin[:80]}) is refused"
    return None


class TokenAndHeaders(BaseHTTPMiddleware):
    """Refuses requests without the token (when one is set) and requests another site's page may have sent;
    adds the security headers to every answer."""

    def __init__(self, app, token: str | None) -> None:
        super().__init__(app)
        self.token = token

    def presented(self, request: Request) -> str | None:
        auth = request.headers.get("authorization", "")
        if auth.startswith("Bearer "):
            return auth.removeprefix("Bearer ")
        return request.cookies.get(COOKIE) or request.query_params.get("token")

    async def dispatch(self, request: Request, call_next):
        refusal = cross_site_refusal(request, loopback_only=self.token is None)
        if refusal:
            return JSONResponse({"error": refusal}, 403)
        given = self.presented(request)
        if self.token and not (given and secrets.compare_digest(given.encode(), self.token.encode())):
            return JSONResponse({"error": "this studio needs its token: open the URL it printed at start"}, 401)
        response = await call_next(request)
        if self.token and request.query_params.get("token"):
            response.set_cookie(COOKIE, self.token, httponly=True, samesite="strict")
        response.headers["Content-Security-Policy"] = CSP
        response.headers["X-Content-Type-Options"] = "nosniff"
        response.headers["Referrer-Policy"] = "no-referrer"
        return response


async def read_json(request: Request, limit: int = limits.MAX_BODY_BYTES) -> dict:
    """The request's JSON object, refused past ``limit`` bytes (whatever Content-Length claims)."""
    declared = request.headers.get("content-length")
    if declared and declared.isdigit() and int(declared) > limit:
        raise BodyTooLarge(f"request body of {declared} bytes; the limit is {limit}")
    body = bytearray()
    async for chunk in request.stream():
        body += chunk
        if len(body) > limit:
            raise BodyTooLarge(f"request body over {limit} bytes")
    try:
        value = json.loads(body or b"{}")
    except json.JSONDecodeError as err:
        raise InputError(f"request body is not JSON ({err.msg})") from None
    if not isinstance(value, dict):
        raise InputError("request body must be a JSON object")
    return value


class BodyTooLarge(InputError):
    pass
