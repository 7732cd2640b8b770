"""What one ALLOW costs the caller's process (docs/performance.md, "The Python helpers: client CPU
per call"): 16,000 sequential calls of the thread helper, of the asyncio helper from one task,
and from 16 tasks at once (1,000 each), each beside redis-py's own ``execute_command`` of the same
``SLIDINGWINDOW.ALLOW`` (the floor: the client library alone), on a server with the module on a
free loopback port; the best of 3 runs of each, in calls per second of this process's CPU time
(what the helper and redis-py spend, not the server) and per second of wall time.

Run: target/venv-python/bin/python clients/python/bench/client_cpu.py (SLIDINGWINDOW_MODULE as
for the tests).
"""

from __future__ import annotations

import asyncio
import time
from typing import Awaitable, Callable, Tuple

from slidingwindow import Limit, SlidingWindow
from slidingwindow import asyncio as aio
from slidingwindow_testkit import Server

CALLS, TASKS = 16_000, 16
# Never binding: every call admitted and logged the same way.
LIMIT = Limit(1, 10**9)


def best(run: Callable[[], None]) -> Tuple[float, float]:
    """The most calls per CPU second of 3 runs, and the calls per wall second of that run."""
    figures = []
    for _ in range(3):
        cpu, wall = time.process_time(), time.perf_counter()
        run()
        figures.append((CALLS / (time.process_time() - cpu), CALLS / (time.perf_counter() - wall)))
    return max(figures)


def main() -> None:
    server = Server(with_module=True)
    try:
        c = server.client()
        sw = SlidingWindow(c)
        words = ("SLIDINGWINDOW.ALLOW", "bench:{cpu}", LIMIT.window, LIMIT.max, "*")
        print("redis-py execute_command: %.0f calls per CPU second, %.0f a second" %
              best(lambda: [c.execute_command(*words) for _ in range(CALLS)]))
        print("thread helper, 1 caller: %.0f calls per CPU second, %.0f a second" %
              best(lambda: [sw.allow("bench:{cpu}", LIMIT) for _ in range(CALLS)]))
        loop = asyncio.new_event_loop()
        ac = server.async_client()
        asw = aio.SlidingWindow(ac)

        async def floor(n: int) -> None:
            for _ in range(n):
                await ac.execute_command(*words)

        async def helper(n: int) -> None:
            for _ in range(n):
                await asw.allow("bench:{cpu}", LIMIT)

        async def tasks(one: Callable[[int], Awaitable[None]]) -> None:
            await asyncio.gather(*(one(CALLS // TASKS) for _ in range(TASKS)))

        for name, one in (("redis.asyncio execute_command", floor), ("asyncio helper", helper)):
            print(f"{name}, 1 task: %.0f calls per CPU second, %.0f a second" %
                  best(lambda: loop.run_until_complete(one(CALLS))))
            print(f"{name}, {TASKS} tasks: %.0f calls per CPU second, %.0f a second" %
                  best(lambda: loop.run_until_complete(tasks(one))))
        loop.run_until_complete(asw.close())
        loop.run_until_complete(ac.aclose())
        loop.close()
    finally:
        server.close()


if __name__ == "__main__":
    main()
