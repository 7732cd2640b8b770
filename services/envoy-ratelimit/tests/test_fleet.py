"""Two services on one config and one Redis with the module's defaults (`slidingwindow.lateness
0`), on both storages, exact and leased (issue 35 item 1): every call is on Redis's clock, so the
busiest second of the scores the key logged never holds more than the limit. The same on a
server without the module (`script`), the services started without a backend flag.

The scores are read while the load runs: a poller reads the key every 50 ms in one MULTI with
Redis's TIME (a compact key converted to a sorted set and back inside it). A member scored `s`
is in the key from its call until a call at `s + 1000` or later trims it (every call is `*`), so
the last poll at a Redis time in `[s, s + 1000)` holds every request logged at `s` less those
taken back by then (a lease's unused permits go back at its end, `s`)."""

from __future__ import annotations

import threading
import time
from collections import Counter

import pytest

from slidingwindow_testkit import wait_for
from test_leases import OK, key, load

LIMIT = 200
TWO = """
domain: d
descriptors:
  - key: user
    rate_limit: {unit: second, requests_per_unit: 200%s}
"""
LEASED = ", lease: {size: 20, duration_ms: 100}"


class Poller:
    """Reads `k`'s scores every 50 ms until stopped: [(redis_ms, Counter(score -> members))]."""

    def __init__(self, r, k: str, compact: bool) -> None:
        self.r, self.k, self.compact = r, k, compact
        self.polls: list[tuple[int, Counter]] = []
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self.run)
        self.thread.start()

    def poll(self) -> None:
        p = self.r.pipeline(transaction=True)
        p.time()
        if self.compact:
            p.execute_command("SLIDINGWINDOW.CONVERT", self.k, "zset")
        p.zrange(self.k, 0, -1, withscores=True)
        if self.compact:
            p.execute_command("SLIDINGWINDOW.CONVERT", self.k, "compact")
        # A missing key makes CONVERT an error: the ZRANGE is then empty.
        got = p.execute(raise_on_error=False)
        secs, micros = got[0]
        scores = got[2] if self.compact else got[1]
        self.polls.append((secs * 1000 + micros // 1000, Counter(int(s) for _, s in scores)))

    def run(self) -> None:
        while not self.stop.is_set():
            self.poll()
            self.stop.wait(0.05)

    def finish(self) -> list[tuple[int, Counter]]:
        """Stops, then polls until Redis's time has reached every score (a lease's permits are
        logged at its end, up to its duration after the load stopped)."""
        self.stop.set()
        self.thread.join()

        def reached():
            self.poll()
            t, scores = self.polls[-1]
            return t >= max(scores, default=0)

        wait_for("Redis's clock past every score", reached)
        return self.polls


def logged_scores(polls: list[tuple[int, Counter]], window_ms: int) -> list[int]:
    """Every score logged, as many times as it was logged and kept: for each score `s`, the count
    of the last poll at a Redis time in [s, s + window_ms). Every score must have such a poll."""
    seen = set().union(*(c.keys() for _, c in polls))
    out = []
    for s in seen:
        inside = [c for t, c in polls if s <= t < s + window_ms]
        assert inside, f"no poll within the window of score {s}: the measurement is incomplete"
        out.extend([s] * inside[-1][s])
    return sorted(out)


def busiest(times: list[int], window_ms: int) -> int:
    """The most of `times` (sorted) in any window (a - w, a]."""
    first = most = 0
    for i, t in enumerate(times):
        while times[first] + window_ms <= t:
            first += 1
        most = max(most, i + 1 - first)
    return most


def two_services(start, r, storage: str, text: str, label: str,
                 url: str | None = None) -> tuple[list[int], list, str, list[str]]:
    """Two services on `text` under 8 threads each for 4 s on one value, on `storage` (`script`:
    `r` is a server without the module, at `url`): checks that the load is above the limit, that
    no second holds more than it, that every admission is logged and that the fleet admits at
    least 75% of it. Answers the logged scores, the polls, a report line and the services'
    stderr."""
    script = storage == "script"
    if not script:
        r.config_set("slidingwindow.storage", storage)
    try:
        services = [start(text, redis_url=url), start(text, redis_url=url)]
        k = key(("user", "alice"))
        poller = Poller(r, k, storage == "compact")
        seconds = 4.0
        results = []

        def run(s):
            results.append(load(s, seconds, 8, lambda t, i: [[("user", "alice")]]))

        workers = [threading.Thread(target=run, args=(s,)) for s in services]
        started = time.monotonic()
        for w in workers:
            w.start()
        for w in workers:
            w.join()
        run_ms = (time.monotonic() - started) * 1000
        # Their leases' unused permits go back.
        errs = [s.close() for s in services]
        polls = poller.finish()
        times = logged_scores(polls, 1000)
    finally:
        if not script:
            r.config_set("slidingwindow.storage", "zset")
    if script:
        assert all("envoy-ratelimit: backend script (auto: " in e for e in errs), errs
    answers = [a for got, failures in results for a in got]
    assert all(failures == [] for _, failures in results)
    admitted = sum(1 for *_, resp in answers if resp.overall_code == OK)
    allowed = LIMIT * run_ms / 1000
    most = busiest(times, 1000)
    report = (
        f"{storage} {label}: {len(answers)} requests, {admitted} admitted, "
        f"{len(times)} logged of {allowed:.0f} allowed in {run_ms:.0f} ms, busiest second {most} of {LIMIT}"
    )
    print(report)
    assert len(answers) >= 2 * allowed, f"the load is above the limit: {report}"
    assert most <= LIMIT, f"over-admitted: {report}"
    # Every admission is logged (leased permits at their lease's end).
    assert len(times) >= admitted, report
    assert admitted >= 0.75 * allowed, report
    return times, polls, report, errs


@pytest.mark.parametrize("storage", ["zset", "compact"])
@pytest.mark.parametrize("leased", [False, True], ids=["exact", "leased"])
def test_two_services_on_a_default_server_never_admit_more_than_the_limit(module_only, start, r, storage, leased):
    assert r.config_get("slidingwindow.lateness") == {"slidingwindow.lateness": "0"}
    two_services(start, r, storage, TWO % (LEASED if leased else ""), "leased" if leased else "exact")


@pytest.mark.parametrize("leased", [False, True], ids=["exact", "leased"])
def test_two_services_without_the_module_never_admit_more_than_the_limit(start, plain, plain_server, leased):
    two_services(start, plain, "script", TWO % (LEASED if leased else ""), "leased" if leased else "exact",
                 url=plain_server.url)
