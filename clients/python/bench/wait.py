"""What WAIT costs, and what a failover forgets without it (docs/operating.md, "Replication and
failover"). Starts its own servers on free loopback ports (tests/conftest.py's), with the module:

1. Cost: one thread calling ``allow`` on a master with one replica, without ``confirm`` and with
   ``confirm=(1, 100)``, taking turns in ROUNDS rounds of CALLS calls; then with no replica attached,
   where each admitted call waits for WAIT's whole timeout.
2. Loss: traffic from THREADS threads, the replica stopped (SIGSTOP) for LAG_S seconds, the master
   killed (SIGKILL), the replica resumed and promoted; how many admitted requests the new master
   lacks, without confirm and with it.

Run: target/venv-python/bin/python clients/python/bench/wait.py (SLIDINGWINDOW_MODULE as for the tests).
"""

from __future__ import annotations

import signal
import statistics
import sys
import threading
import time
import uuid
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))

from conftest import Server  # noqa: E402
from slidingwindow import Limit, SlidingWindow, UnavailableError  # noqa: E402

ROUNDS, CALLS, THREADS, LAG_S = 5, 2_000, 4, 0.3
BIG = Limit(3600, 10**9)


def replica_of(master: Server) -> Server:
    r = Server(with_module=True, extra=["--replicaof", "127.0.0.1", str(master.port)])
    c = r.client()
    while c.info("replication")["master_link_status"] != "up":
        time.sleep(0.01)
    return r


def per_call_us(sw: SlidingWindow, n: int) -> float:
    key = f"rl:{{{uuid.uuid4().hex}}}"
    t = time.perf_counter()
    for _ in range(n):
        assert sw.allow(key, BIG).allowed
    return (time.perf_counter() - t) / n * 1e6


def cost() -> None:
    master = Server(with_module=True)
    replica = replica_of(master)
    try:
        plain = SlidingWindow(master.client())
        waiting = SlidingWindow(master.client(), confirm=(1, 100))
        rows = {"without confirm": [], "confirm=(1, 100)": []}
        for _ in range(ROUNDS):
            rows["without confirm"].append(per_call_us(plain, CALLS))
            rows["confirm=(1, 100)"].append(per_call_us(waiting, CALLS))
        for name, values in rows.items():
            print(f"{name:18} median {statistics.median(values):7.1f} µs per admitted call, rounds {', '.join(f'{v:.1f}' for v in values)}")
        ratios = [b / a for a, b in zip(rows["without confirm"], rows["confirm=(1, 100)"])]
        print(f"confirm / without, round by round: {', '.join(f'{r:.2f}' for r in ratios)}")
        replica.close()
        lonely = SlidingWindow(master.client(), confirm=(1, 20))
        key = f"rl:{{{uuid.uuid4().hex}}}"
        t = time.perf_counter()
        got = [lonely.allow(key, BIG) for _ in range(20)]
        print(f"no replica, confirm=(1, 20): {(time.perf_counter() - t) / 20 * 1e3:.1f} ms per call, "
              f"{sum(r.allowed for r in got)} of 20 admitted, {master.client().zcard(key)} left logged")
    finally:
        master.close()
        replica.close()


def loss(confirm) -> None:
    master = Server(with_module=True)
    replica = replica_of(master)
    try:
        sw = SlidingWindow(master.client(), confirm=confirm, timeout=0.5)
        key = "rl:{loss}"
        admitted = [0]
        lock = threading.Lock()
        stop = threading.Event()

        def traffic():
            while not stop.is_set():
                try:
                    r = sw.allow(key, BIG)
                except UnavailableError:
                    return
                if r.allowed:
                    with lock:
                        admitted[0] += 1

        threads = [threading.Thread(target=traffic) for _ in range(THREADS)]
        for t in threads:
            t.start()
        time.sleep(1.0)
        replica.proc.send_signal(signal.SIGSTOP)
        time.sleep(LAG_S)
        master.proc.kill()
        master.proc.wait()
        stop.set()
        for t in threads:
            t.join()
        replica.proc.send_signal(signal.SIGCONT)
        c = replica.client()
        c.replicaof("NO", "ONE")
        kept = c.zcard(key)
        label = "without confirm" if confirm is None else f"confirm={confirm}"
        print(f"{label:18} admitted {admitted[0]}, the promoted replica holds {kept}: {admitted[0] - kept} admissions forgotten")
    finally:
        replica.proc.send_signal(signal.SIGCONT)
        master.close()
        replica.close()


if __name__ == "__main__":
    cost()
    loss(None)
    loss((1, 100))
