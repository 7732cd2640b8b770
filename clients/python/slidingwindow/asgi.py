"""ASGI middleware (Starlette, FastAPI, any ASGI app) over the asyncio helper: one ``allow`` per
HTTP request, 429 with ``Retry-After`` and the ``RateLimit-Policy`` / ``RateLimit`` headers
exactly as services/gateway sends them (spec/headers.json), refunds when the app answers 5xx,
and fail-open or -closed when Redis cannot decide; as clients/go/httplimit does for net/http."""

from __future__ import annotations

import json
import logging
import time
from typing import Any, Awaitable, Callable, Dict, List, Optional, Sequence, Tuple

from .asyncio import SlidingWindow
from .headers import canonical_ip, headers, names_of
from .protocol import Limits, limit_list
from .results import Result, UnavailableError

Scope = Dict[str, Any]
Message = Dict[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
ASGIApp = Callable[[Scope, Receive, Send], Awaitable[None]]

UNAVAILABLE_BODY = b'{"error":"rate limiter unavailable"}\n'
_STAMPED = (b"ratelimit-policy", b"ratelimit", b"retry-after")


def client_ip(scope: Scope) -> str:
    """The client's address as one key (``canonical_ip``), or "" when the server gives none."""
    client = scope.get("client")
    return canonical_ip(client[0]) if client else ""


def refused_body(result: Result, names: Sequence[str]) -> bytes:
    """The 429's JSON body, as the gateway's: ``{"error":"rate limited","limit":"l0","retry_after_ms":N}``."""
    return (f'{{"error":"rate limited","limit":{json.dumps(names[result.limit])},'
            f'"retry_after_ms":{result.retry_after_ms}}}\n').encode()


class RateLimitMiddleware:
    """Limits each identity's HTTP requests to ``limits`` (the first is the command's positional
    one) on the key ``rl:{<identity>}``:

    - ``names``: the limits' names in the headers; default ``l0``, ``l1``, ... (the gateway's).
    - ``identity(scope)``: who is asking; default the client's address (``client_ip``); an empty
      identity falls back to it. An identity from a header (an API key) must only be trusted
      behind authentication: any client can send a fresh one with every request.
    - ``refund_server_errors``: a request the app answers 5xx (or raises on) is taken back after
      the response (``REFUND key 1 AT`` the time it was decided at).
    - ``fail_closed``: when Redis cannot decide, answer 503; by default such requests pass,
      without rate-limit headers. Failures are logged to the ``slidingwindow`` logger, one line
      a second at most.

    Requests other than HTTP (websockets, lifespan) pass unlimited. Starlette / FastAPI:
    ``app.add_middleware(RateLimitMiddleware, limiter=sw, limits=[Limit(1, 10)])``.
    """

    def __init__(self, app: ASGIApp, limiter: SlidingWindow, limits: Limits, *, names: Optional[Sequence[str]] = None,
                 identity: Optional[Callable[[Scope], str]] = None, refund_server_errors: bool = False,
                 fail_closed: bool = False) -> None:
        if not isinstance(limiter, SlidingWindow):
            raise TypeError("limiter must be a slidingwindow.asyncio.SlidingWindow (over a redis.asyncio client)")
        self.limits = limit_list(limits)
        self.names = list(names_of(len(self.limits), names))
        if len(self.names) != len(self.limits):
            raise ValueError("one name for each limit")
        self.app = app
        self.limiter = limiter
        self.identity = identity
        self.refund_server_errors = refund_server_errors
        self.fail_closed = fail_closed
        self.log = ErrorLog(logging.getLogger("slidingwindow"))

    def key(self, scope: Scope) -> str:
        who = self.identity(scope) if self.identity is not None else ""
        return f"rl:{{{who or client_ip(scope)}}}"

    def stamped(self, result: Result) -> List[Tuple[bytes, bytes]]:
        """The rate-limit headers of a checked request, in the gateway's order."""
        return [(k.encode(), v.encode()) for k, v in headers(result, self.limits, self.names).items()]

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        key = self.key(scope)
        try:
            result = await self.limiter.allow(key, self.limits, detail=self.refund_server_errors)
        except UnavailableError as e:
            result = Result(True, 0, 0, 0, 0, 0, error=e)
        if result.error is not None:
            self.log.failed(f"rate limiter unavailable for {key}: {result.error}")
            if self.fail_closed:
                await respond(send, 503, [], UNAVAILABLE_BODY)
                return
            await self.app(scope, receive, send)
            return
        self.log.succeeded()
        stamp = self.stamped(result)
        if not result.allowed:
            await respond(send, 429, stamp, refused_body(result, self.names))
            return
        status = [500]  # until the app starts its response

        async def stamping(message: Message) -> None:
            if message["type"] == "http.response.start":
                status[0] = message["status"]
                kept = [(k, v) for k, v in message.get("headers", []) if k.lower() not in _STAMPED]
                message = {**message, "headers": kept + stamp}
            await send(message)

        try:
            await self.app(scope, receive, stamping)
        finally:
            if self.refund_server_errors and status[0] >= 500:
                await self.refund(key, result)

    async def refund(self, key: str, result: Result) -> None:
        """Takes back this request: the newest logged at or before its own time, never a later one."""
        try:
            await self.limiter.refund(key, 1, at=result.now)
        except Exception as e:
            self.log.failed(f"refund of {key} failed: {e}")


async def respond(send: Send, status: int, extra: List[Tuple[bytes, bytes]], body: bytes) -> None:
    """A whole JSON response."""
    head = [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())]
    await send({"type": "http.response.start", "status": status, "headers": head + extra})
    await send({"type": "http.response.body", "body": body})


class ErrorLog:
    """One line a second at most about failures, saying how many it left out, and one line when
    calls succeed again after a failure."""

    def __init__(self, logger: logging.Logger) -> None:
        self.logger = logger
        self.failing = False
        self.last: Optional[float] = None
        self.left = 0

    def failed(self, what: str) -> None:
        self.failing = True
        now = time.monotonic()
        if self.last is not None and now - self.last < 1.0:
            self.left += 1
            return
        self.logger.warning("slidingwindow: %s%s", what, self._left_out())
        self.last = now

    def succeeded(self) -> None:
        if self.failing:
            self.failing = False
            self.logger.warning("slidingwindow: rate limiter answering again%s", self._left_out())

    def _left_out(self) -> str:
        n, self.left = self.left, 0
        return f" ({n} more since the last line)" if n else ""
