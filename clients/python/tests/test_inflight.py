"""In-flight limits (acquire / release) and costs known after the response (reserve / settle), on
both paths, against a real server's clock."""

from __future__ import annotations

import threading
import time

import pytest

from slidingwindow import Limit, Settlement, SlidingWindow, SlidingWindowError


def in_window(c, key: str) -> int:
    """Members of ``key`` a 1-hour PEEK counts (what is still held)."""
    return SlidingWindow(c).peek(key, Limit(3600, 1_000_000)).count - 1


def test_n_plus_one_holders_see_exactly_one_refusal(path, key):
    _, server = path
    sw = SlidingWindow(server.client())
    n = 5
    start = threading.Barrier(n + 1)
    done = threading.Event()
    results = []
    lock = threading.Lock()

    def holder() -> None:
        start.wait()
        slot = sw.acquire(key, n, 60)
        with lock:
            results.append(slot)
        done.wait(30)
        slot.release()

    threads = [threading.Thread(target=holder) for _ in range(n + 1)]
    for t in threads:
        t.start()
    deadline = time.monotonic() + 30
    while len(results) < n + 1 and time.monotonic() < deadline:
        time.sleep(0.01)
    assert sorted(s.allowed for s in results) == [False] + [True] * n
    assert in_window(server.client(), key) == n
    done.set()
    for t in threads:
        t.join(30)
    # Every slot given back: the key holds nothing, and a refused slot's release takes nothing.
    assert in_window(server.client(), key) == 0
    refused = next(s for s in results if not s.allowed)
    assert refused.release() is False


def test_never_more_than_n_in_flight_from_the_upstreams_side(path, key):
    _, server = path
    sw = SlidingWindow(server.client())
    n, workers, rounds = 3, 8, 15
    inside = [0, 0]  # now, most seen
    lock = threading.Lock()
    refusals = [0]

    def worker() -> None:
        for _ in range(rounds):
            with sw.acquire(key, n, 60) as slot:
                if not slot.allowed:
                    with lock:
                        refusals[0] += 1
                    continue
                with lock:
                    inside[0] += 1
                    inside[1] = max(inside[1], inside[0])
                time.sleep(0.002)
                with lock:
                    inside[0] -= 1

    threads = [threading.Thread(target=worker) for _ in range(workers)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert 1 <= inside[1] <= n
    assert refusals[0] > 0
    assert in_window(server.client(), key) == 0


def test_a_holder_that_dies_frees_its_slot_when_the_hold_passes(path, key):
    _, server = path
    sw = SlidingWindow(server.client())
    held = sw.acquire(key, 1, 1)
    assert held.allowed
    # The holder dies: no release. The next is refused until its second is over.
    assert not sw.acquire(key, 1, 1).allowed
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        slot = sw.acquire(key, 1, 1)
        if slot.allowed:
            slot.release()
            break
        time.sleep(0.05)
    else:
        pytest.fail("the dead holder's slot never came back")
    # Its release, late, takes nothing: the acquire after the hold trimmed its member.
    assert held.release() is False


def test_reserve_then_settle(path, key):
    _, server = path
    c = server.client()
    sw = SlidingWindow(c)
    limits = Limit(60, 100)
    r = sw.reserve(key, limits, 10)
    assert r.allowed and in_window(c, key) == 10
    assert r.settle(3) == Settlement(refunded=7, charged=0, overrun=0)
    assert in_window(c, key) == 3
    with pytest.raises(SlidingWindowError):
        r.settle(3)
    r = sw.reserve(key, limits, 10)
    assert r.settle(15) == Settlement(refunded=0, charged=5, overrun=0)
    assert in_window(c, key) == 18
    assert sw.reserve(key, limits, 10).settle(10) == Settlement(0, 0, 0)
    assert in_window(c, key) == 28
    # An excess that does not fit is an overrun: spent, reported, not charged.
    r = sw.reserve(key, limits, 70)
    assert r.allowed and in_window(c, key) == 98
    assert r.settle(90) == Settlement(refunded=0, charged=0, overrun=20)
    assert in_window(c, key) == 98
    # Cancel refunds it all; a refused reservation cannot be settled.
    r = sw.reserve(key, Limit(60, 1000), 50)
    assert r.cancel() == 50 and in_window(c, key) == 98
    refused = sw.reserve(key, limits, 5)
    assert not refused.allowed
    with pytest.raises(SlidingWindowError):
        refused.settle(0)
    with pytest.raises(ValueError):
        sw.reserve(key, Limit(60, 1000), 1).settle(-1)
