"""The ASGI middleware (slidingwindow.asgi): spec/headers.json's headers as it renders them, and
a FastAPI app end to end (httpx's ASGI transport) on both paths: a burst then 429 with the
gateway's headers and body, one key per client address, refunds of 5xx answers, Redis down
(fail-open, fail-closed), and a misconfiguration refused."""

from __future__ import annotations

import json
import re

import httpx
import pytest
from fastapi import FastAPI, Response

from slidingwindow import Limit, Result, SlidingWindow, headers
from slidingwindow import asyncio as aio
from slidingwindow.asgi import RateLimitMiddleware, refused_body
from slidingwindow_testkit import Server

from test_headers import SPEC as HEADERS

MINUTE = [Limit(60, 3)]


def app_with(asw, limits=MINUTE, **options) -> FastAPI:
    app = FastAPI()
    app.add_middleware(RateLimitMiddleware, limiter=asw, limits=limits, **options)

    @app.get("/")
    def index():
        return {"ok": True}

    @app.get("/own-headers")
    def own_headers(response: Response):
        response.headers["RateLimit"] = "the handler's"
        return {"ok": True}

    @app.get("/fails")
    def fails():
        return Response(status_code=502)

    @app.get("/raises")
    def raises():
        raise RuntimeError("the handler failed")

    return app


def client_of(app, address: str = "127.0.0.1") -> httpx.AsyncClient:
    transport = httpx.ASGITransport(app=app, client=(address, 40000), raise_app_exceptions=False)
    return httpx.AsyncClient(transport=transport, base_url="http://test")


def test_every_header_case_as_the_middleware_renders_it(module_server):
    asw = aio.SlidingWindow(module_server.async_client())
    for case in HEADERS["cases"]:
        limits = [Limit(l["window"], l["max"]) for l in case["limits"]]
        names = [l["name"] for l in case["limits"]]
        mw = RateLimitMiddleware(app_with(asw), asw, limits, names=names)
        r = case["reply"]
        result = Result(r["allowed"], r["count"], r["remaining"], r["retry_after_ms"], r["reset_after_ms"], r["limit"])
        want = [(k.encode(), v.encode()) for k, v in case["headers"]["gateway"]]
        assert mw.stamped(result) == want, case["name"]
    assert len(HEADERS["cases"]) > 30


def test_a_burst_then_429_with_the_gateways_headers(path, key, settle):
    name, server = path
    asw = aio.SlidingWindow(server.async_client())
    app = app_with(asw, names=["minute"])
    server.client().delete("rl:{127.0.0.2}")

    async def run():
        async with client_of(app, "127.0.0.2") as http:
            return [await http.get("/") for _ in range(5)]

    got = settle(run())
    assert [r.status_code for r in got] == [200, 200, 200, 429, 429]
    assert [r.headers["RateLimit"] for r in got[:3]] == [f'"minute";r={n};t=60' for n in (2, 1, 0)]
    assert all(r.headers["RateLimit-Policy"] == '"minute";q=3;w=60' for r in got)
    assert all("Retry-After" not in r.headers for r in got[:3]) and got[0].json() == {"ok": True}
    refused = got[3]
    body = refused.json()
    assert body["error"] == "rate limited" and body["limit"] == "minute" and 0 < body["retry_after_ms"] <= 60_000
    assert refused.headers["content-type"] == "application/json"
    # Exactly what headers() and refused_body() give for the reply the body reports.
    result = Result(False, 3, 0, body["retry_after_ms"], int(refused.headers["RateLimit"].split("t=")[1]) * 1000, 0)
    want = headers(result, MINUTE, ["minute"])
    assert {k: refused.headers[k] for k in want} == want
    assert refused.content == refused_body(result, ["minute"])
    # The key is the client's address, and the server logged exactly the 3 admitted.
    assert server.client().zcard("rl:{127.0.0.2}") == 3
    settle(asw.close())


def test_one_key_per_client_address(path, settle):
    _, server = path
    asw = aio.SlidingWindow(server.async_client())
    app = app_with(asw, limits=[Limit(60, 1)])
    c = server.client()
    c.delete("rl:{127.0.0.3}", "rl:{::1}")

    async def run(address: str):
        async with client_of(app, address) as http:
            return [(await http.get("/")).status_code for _ in range(2)]

    # An IPv4 client of a dual-stack socket is the same client as over IPv4.
    assert settle(run("127.0.0.3")) == [200, 429]
    assert settle(run("::ffff:127.0.0.3")) == [429, 429]
    assert settle(run("::1")) == [200, 429]
    assert (c.zcard("rl:{127.0.0.3}"), c.zcard("rl:{::1}")) == (1, 1)
    settle(asw.close())


def test_an_identity_and_the_handlers_own_header(path, key, settle):
    _, server = path
    asw = aio.SlidingWindow(server.async_client())
    app = app_with(asw, identity=lambda scope: key[4:-1])

    async def run():
        async with client_of(app) as http:
            return await http.get("/own-headers")

    r = settle(run())
    assert r.status_code == 200 and r.headers.get_list("RateLimit") == ['"l0";r=2;t=60']
    assert server.client().zcard(key) == 1
    settle(asw.close())


def test_server_errors_are_refunded(path, key, settle):
    _, server = path
    asw = aio.SlidingWindow(server.async_client())
    app = app_with(asw, identity=lambda scope: key[4:-1], refund_server_errors=True)

    async def run():
        async with client_of(app) as http:
            return [(await http.get(p)).status_code for p in ("/fails", "/raises", "/", "/fails")]

    assert settle(run()) == [502, 500, 200, 502]
    # Only the 200 stays counted.
    assert server.client().zcard(key) == 1
    settle(asw.close())


@pytest.mark.parametrize("fail_closed", [False, True])
def test_redis_down(key, settle, fail_closed, caplog):
    s = Server(with_module=True)
    try:
        asw = aio.SlidingWindow(s.async_client(), timeout=1.0)
        app = app_with(asw, fail_closed=fail_closed)
        s.stop()

        async def run(n: int):
            async with client_of(app) as http:
                return [await http.get("/") for _ in range(n)]

        got = settle(run(3))
        for r in got:
            if fail_closed:
                assert (r.status_code, r.content) == (503, b'{"error":"rate limiter unavailable"}\n')
            else:
                assert r.status_code == 200 and r.json() == {"ok": True}
            assert "RateLimit" not in r.headers and "RateLimit-Policy" not in r.headers
        # A line a second at most, each counting those it left out, then one when Redis answers
        # again: together they account for the three failures.
        assert s.start()
        assert [r.status_code for r in settle(run(1))] == [200]
        lines = [r.getMessage() for r in caplog.records if r.name == "slidingwindow"]
        assert "rate limiter unavailable for rl:{127.0.0.1}" in lines[0], lines
        assert lines[-1].startswith("slidingwindow: rate limiter answering again"), lines
        left_out = sum(int(m.group(1)) for m in map(re.compile(r"\((\d+) more since the last line\)$").search, lines) if m)
        assert len(lines) - 1 + left_out == 3, lines
    finally:
        s.close()


def test_a_misconfiguration_is_refused(module_server):
    asw = aio.SlidingWindow(module_server.async_client())
    with pytest.raises(ValueError, match="one name for each limit"):
        RateLimitMiddleware(app_with(asw), asw, [Limit(1, 10), Limit(60, 100)], names=["second"])
    with pytest.raises(ValueError, match="at least one limit"):
        RateLimitMiddleware(app_with(asw), asw, [])
    with pytest.raises(TypeError, match="redis.asyncio"):
        RateLimitMiddleware(app_with(asw), SlidingWindow(module_server.client()), MINUTE)
    assert json.loads(refused_body(Result(False, 1, 0, -1, 0, 0), ["l0"])) == {
        "error": "rate limited", "limit": "l0", "retry_after_ms": -1}
