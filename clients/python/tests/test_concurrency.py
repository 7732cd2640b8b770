"""Concurrent callers on one key (docs/clients.md, "Which time to pass"): 32 threads at 10 per
second, every window of the scores logged holds at most 10 and the busiest exactly 10: with the
server's clock (``*``), and with the callers' own clock when the server's lateness covers how far
one caller's ``now`` may be behind another's."""

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
        self.members.update(self.c.zrange(self.key, 0, -1, withscores=True))

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
