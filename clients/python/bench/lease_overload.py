"""A Lease under overload (docs/performance.md, "Leases under overload"): limit 100 per 1 s, leases
of 10 per 100 ms, 8 threads each sending a request every 16 ms by a schedule (500 a second, 5x the
limit) for 5 s on one key, on a server with the module (tests/conftest.py's, on a free loopback
port), through the module and through the script. Prints the requests, the module's calls (ALLOW,
PEEK, REFUND; EVALSHA on the script path) from INFO commandstats, the admitted, and the busiest
1 s window of the logged scores (TIME + ZRANGE snapshots every 50 ms; members refunded inside
their window dropped).

Run: target/venv-python/bin/python clients/python/bench/lease_overload.py (SLIDINGWINDOW_MODULE as
for the tests).
"""

from __future__ import annotations

import sys
import uuid
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))

from conftest import Server  # noqa: E402
from slidingwindow import Limit, SlidingWindow  # noqa: E402
from test_concurrency import offer  # noqa: E402
from test_options import busiest  # noqa: E402

LIMIT, RUN_S, EVERY_S = Limit(1, 100), 5.0, 0.016


def run(server: Server, use: str) -> None:
    key = f"rl:{{{uuid.uuid4()}}}"
    lease = SlidingWindow(server.client(), use=use).lease(key, LIMIT, size=10, duration_ms=100)
    results, calls, scores = offer(server, lease, key, EVERY_S, RUN_S, threads=8)
    admitted = sum(r.allowed for r in results)
    allows = LIMIT.max * RUN_S
    print(f"{use}: {len(results)} requests, {calls} calls ({calls / len(results):.4f} per request), "
          f"{admitted} admitted ({admitted / allows:.0%} of {allows:.0f}), logged {len(scores)}, "
          f"busiest 1 s window {busiest(scores, 1000)}")


def main() -> None:
    server = Server(with_module=True)
    try:
        for use in ("module", "lua"):
            run(server, use)
    finally:
        server.close()


if __name__ == "__main__":
    main()
