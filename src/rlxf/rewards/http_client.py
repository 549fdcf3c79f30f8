"""POSTing JSON to a scoring endpoint (the remote reward server, an LLM judge) with bounded retries.

A slow, refusing, failing (HTTP 5xx, 429) or garbage-answering endpoint is tried ``attempts`` times in
all, waiting ``backoff_seconds`` before the second try and twice as long before each later one; then
one error names the endpoint and what every try got. Other HTTP errors (4xx: the request itself is
wrong) are not retried. Each try is bounded by ``timeout_seconds``, so nothing hangs.
"""

from __future__ import annotations

import json
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, TypeVar

from rlxf.errors import RlxfError

T = TypeVar("T")
RETRIED_HTTP_CODES = frozenset({429, 500, 502, 503, 504})


class EndpointError(RlxfError, RuntimeError):
    """An endpoint gave no usable answer (after its retries)."""


@dataclass(frozen=True)
class RetryPolicy:
    attempts: int = 3  # tries in all
    backoff_seconds: float = 0.5  # wait before the 2nd try, doubled before each later one
    timeout_seconds: float = 60.0  # each try

    def __post_init__(self) -> None:
        if self.attempts < 1 or self.backoff_seconds < 0 or self.timeout_seconds <= 0:
            raise ValueError(f"retry policy needs attempts >= 1, backoff >= 0, timeout > 0; got {self}")

    def wait_before(self, attempt: int) -> float:
        return 0.0 if attempt == 0 else self.backoff_seconds * 2 ** (attempt - 1)


class _Permanent(Exception):
    """A failure that another try would repeat."""


def post_json(
    url: str, body: dict, parse: Callable[[Any], T], policy: RetryPolicy, headers: dict[str, str] | None = None,
    name: str = "endpoint", error: type[EndpointError] = EndpointError,
) -> T:
    """``parse(reply JSON)`` of the first usable answer; ``parse`` raises (KeyError, TypeError,
    ValueError, IndexError) on a reply it cannot use, which counts as garbage and is retried."""
    data = json.dumps(body, default=str).encode()
    failures: list[str] = []
    for attempt in range(policy.attempts):
        time.sleep(policy.wait_before(attempt))
        request = urllib.request.Request(url, data, {"Content-Type": "application/json", **(headers or {})},
                                         method="POST")
        try:
            return parse(json.loads(_read(request, policy.timeout_seconds)))
        except _Permanent as failure:
            failures.append(str(failure))
            break
        except (KeyError, TypeError, ValueError, IndexError) as garbage:  # json.JSONDecodeError is a ValueError
            failures.append(f"garbage reply ({type(garbage).__name__}: {garbage})"[:300])
        except OSError as failure:  # refused, reset, timed out (URLError, TimeoutError are OSErrors)
            failures.append(str(failure))
    tries = "; ".join(f"try {i + 1}: {text}" for i, text in enumerate(failures))
    raise error(f"{name} {url} gave no usable answer after {len(failures)} tries: {tries}")


def _read(request: urllib.request.Request, timeout: float) -> bytes:
    try:
        with urllib.request.urlopen(request, timeout=timeout) as reply:
            return reply.read()
    except urllib.error.HTTPError as err:
        detail = err.read().decode(errors="replace")[:300]
        if err.code in RETRIED_HTTP_CODES:
            raise OSError(f"answered {err.code}: {detail}") from None
        raise _Permanent(f"answered {err.code} (not retried): {detail}") from None
    except urllib.error.URLError as err:
        raise OSError(f"unreachable ({err.reason})") from None
    except TimeoutError:
        raise OSError(f"no answer within {timeout}s") from None
