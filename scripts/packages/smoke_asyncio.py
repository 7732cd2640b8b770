"""Smoke test of the installed Python package's asyncio side (scripts/test-packages.sh runs it in
a clean virtualenv with `slidingwindow[asyncio]`, FastAPI and httpx, outside the source tree):
three calls of a limit of 2 through slidingwindow.asyncio on a server with the module and on one
without (the packaged Lua script), then the README's FastAPI app behind RateLimitMiddleware,
driven by httpx's ASGI transport: 200, 200, 429 with the gateway's headers.
Usage: python smoke_asyncio.py MODULE_PORT PLAIN_PORT"""

import asyncio
import sys
import uuid

import httpx
import redis.asyncio as redis
from fastapi import FastAPI
from slidingwindow import Limit
from slidingwindow.asgi import RateLimitMiddleware
from slidingwindow.asyncio import SlidingWindow

module_port, plain_port = int(sys.argv[1]), int(sys.argv[2])


async def main() -> None:
    for port, module in ((module_port, True), (plain_port, False)):
        sw = SlidingWindow(redis.Redis(host="127.0.0.1", port=port))
        assert await sw.uses_module == module
        key = f"smoke:{{python-asyncio}}:{uuid.uuid4()}"
        got = [await sw.allow(key, Limit(window=60, max=2)) for _ in range(3)]
        assert [(g.allowed, g.remaining) for g in got] == [(True, 1), (True, 0), (False, 0)], got

        app = FastAPI()
        app.add_middleware(RateLimitMiddleware, limiter=sw, limits=[Limit(window=60, max=2)], names=["minute"],
                           identity=lambda scope: key)

        @app.get("/")
        async def index():
            return {"ok": True}

        transport = httpx.ASGITransport(app=app, client=("127.0.0.1", 40000))
        async with httpx.AsyncClient(transport=transport, base_url="http://smoke") as http:
            answers = [await http.get("/") for _ in range(3)]
        assert [a.status_code for a in answers] == [200, 200, 429], answers
        assert answers[0].headers["RateLimit"] == '"minute";r=1;t=60', answers[0].headers
        assert answers[2].json()["limit"] == "minute" and "Retry-After" in answers[2].headers
        await sw.close()
        print(f"smoke_asyncio.py: port {port}: allowed, allowed, refused; FastAPI 200, 200, 429")


asyncio.run(main())
print("smoke_asyncio.py: ok")
