"""Concurrent callers on one key (docs/clients.md, "Which time to pass"): 32 threads at 10 per
second, every window of the scores logged holds at most 10 and the busiest exactly 10: with the
server's clock (``*``), and with the callers' own clock when the server's lateness covers how far
one caller's ``now`` may be behind another's. Then a lease object under overload: its refusals
remembered, one Redis call for many requests, no window above the limit."""

from __future__ import annotations

import random
import threading
import time

import pytest

from slidingwindow import Limit, SlidingWindow

from test_options import busiest

THREADS = 32
RUN_S = 2.0
LATENESS = 5_000


class Log:
    """Every member the key ever held, by name (ULIDs never repeat), from ZRANGE WITHSCORES
    snapshots taken while the traffic runs; complete when it holds as many as were admitted."""

    def __init__(self, c, key):
        self.c, self.key = c, key
        self.members = {}
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self.run)
        self.thread.start()

    def run(self):
        while not self.stop.is_set():
            self.snapshot()
            self.stop.wait(0.05)

    def snapshot(self):
        pipe = self.c.pipeline(transaction=True)
        pipe.time().zrange(self.key, 0, -1, withscores=True)
        (secs, micros), held = pipe.execute()
        held = dict(held)
        now = secs * 1000 + micros // 1000
        # A member gone while still inside its window (score > now - window) was refunded: it no
        # longer counts. None of these tests' windows is longer than 1 s.
        for name in [m for m, s in self.members.items() if m not in held and s > now - 1_000]:
            del self.members[name]
        self.members.update(held)

    def scores(self):
        self.stop.set()
        self.thread.join()
        self.snapshot()
        return sorted(int(s) for s in self.members.values())


@pytest.mark.parametrize("clock", ["server", "caller"])
def test_threads_on_one_key_never_exceed(path, key, clock):
    name, server = path
    c = server.client()
    lateness = LATENESS if clock == "caller" else 0
    if name == "module":
        c.config_set("slidingwindow.lateness", lateness)
    sw = SlidingWindow(c, lateness=lateness)
    admitted = []
    late = []
    lock = threading.Lock()
    log = Log(server.client(), key)
    stop = time.monotonic() + RUN_S

    def caller(seed):
        rng = random.Random(seed)
        while time.monotonic() < stop:
            now = None
            if clock == "caller":
                now = int(time.time() * 1000)
                # Stamped, then sent a little later: callers arrive out of order.
                time.sleep(rng.random() * 0.02)
            r = sw.allow(key, Limit(1, 10), now=now)
            done = int(time.time() * 1000)
            with lock:
                admitted.append(r.allowed)
                if now is not None:
                    late.append(done - now)

    try:
        threads = [threading.Thread(target=caller, args=(i,)) for i in range(THREADS)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    finally:
        if name == "module":
            c.config_set("slidingwindow.lateness", 0)
    scores = log.scores()
    assert len(scores) == sum(admitted), "the snapshots missed a logged request"
    if clock == "caller":
        # The premise: no call's now was further behind than the lateness covers.
        assert max(late) < lateness, f"a call arrived {max(late)} ms after its now"
    assert busiest(scores, 1_000) == 10
    assert sum(admitted) >= 10 * RUN_S and len(admitted) > sum(admitted)


LEASE_LIMIT = Limit(1, 100)
LEASE_THREADS = 8
LEASE_RUN_S = 5.0
# Each thread's interval between requests: together ten times what the limit admits.
LEASE_EVERY_S = LEASE_THREADS / (10 * LEASE_LIMIT.max)


def slidingwindow_calls(c) -> int:
    """The ALLOW, PEEK and REFUND calls the server ran (on the script path, the script's runs)."""
    names = ("cmdstat_slidingwindow.allow", "cmdstat_slidingwindow.peek", "cmdstat_slidingwindow.refund", "cmdstat_evalsha",
             "cmdstat_eval")
    return sum(v["calls"] for k, v in c.info("commandstats").items() if k in names)


def offer(server, lease, key, every_s: float, run_s: float = LEASE_RUN_S, threads: int = LEASE_THREADS):
    """``threads`` threads each asking ``lease`` for a permit every ``every_s`` by a schedule for
    ``run_s``, then ``close()``: the results, the server's calls meanwhile, the scores logged."""
    c = server.client()
    log = Log(server.client(), key)
    c.config_resetstat()
    results = []
    lock = threading.Lock()
    start = time.monotonic()

    def caller():
        got = []
        for i in range(int(run_s / every_s)):
            time.sleep(max(0.0, start + i * every_s - time.monotonic()))
            got.append(lease.allow())
        with lock:
            results.extend(got)

    workers = [threading.Thread(target=caller) for _ in range(threads)]
    for t in workers:
        t.start()
    for t in workers:
        t.join()
    lease.close()
    return results, slidingwindow_calls(c), log.scores()


def test_a_lease_under_overload_remembers_its_refusals(path, key):
    """Limit 100 per second, leases of 10 per 100 ms, 8 threads offering 10x the limit for 5 s:
    at most one Redis call per 20 requests, no 1 s window of the logged scores above the limit,
    and the logged permits exactly those handed out."""
    name, server = path
    lease = SlidingWindow(server.client()).lease(key, LEASE_LIMIT, size=10, duration_ms=100)
    results, calls, scores = offer(server, lease, key, LEASE_EVERY_S)
    admitted = sum(r.allowed for r in results)
    refused = [r for r in results if not r.allowed]
    assert len(results) >= 5 * LEASE_LIMIT.max * LEASE_RUN_S, "the threads offered less than 5x the limit"
    assert calls * 20 <= len(results), f"{calls} calls for {len(results)} requests"
    assert busiest(scores, 1_000) <= LEASE_LIMIT.max
    assert len(scores) == admitted
    # A refusal answered from memory still tells how long to wait.
    assert refused and all(r.retry_after_ms > 0 and r.remaining == 0 for r in refused)
    print(f"{name}: {len(results)} requests, {calls} calls ({calls / len(results):.4f} a request), "
          f"{admitted} admitted ({admitted / (LEASE_LIMIT.max * LEASE_RUN_S):.0%} of what the limit allows)")
