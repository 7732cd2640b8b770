"""LEASE, PRECISION, DETAIL and lateness through the helper, on both paths; the lease object; the HTTP headers."""

from __future__ import annotations

import threading
import time

import pytest
import redis

from slidingwindow import (AllResult, Limit, LimitState, Result, SlidingWindow, canonical_ip,
                           policy_header, ratelimit_header, retry_after_header, seconds_up)
from slidingwindow_testkit import command_calls as calls, wait_for

NOW = 1_700_000_000_000


def server_ms(c: redis.Redis) -> int:
    secs, micros = c.time()
    return secs * 1000 + micros // 1000


def scores(c: redis.Redis, key: str):
    return [int(s) for _, s in c.zrange(key, 0, -1, withscores=True)]


def test_detail_gives_every_limit_and_now(path, key):
    sw = SlidingWindow(path[1].client())
    limits = [Limit(1, 10), Limit(60, 100)]
    for i in range(9):
        sw.allow(key, limits, now=NOW + i)
    r = sw.allow(key, limits, now=NOW + 200, detail=True)
    assert r == Result(True, 10, 0, 800, 1000, 0, states=(LimitState(10, 0, 800, 1000), LimitState(10, 90, 0, 60_000)),
                       now=NOW + 200)
    # Without DETAIL the same call answers without them, and PEEK answers what ALLOW would.
    assert sw.peek(key, limits, now=NOW + 200, detail=True) == Result(
        False, 10, 0, 800, 1000, 0, states=(LimitState(10, 0, 800, 1000), LimitState(10, 90, 0, 60_000)), now=NOW + 200)
    assert sw.peek(key, limits, now=NOW + 200).states is None


def test_detail_now_is_the_server_clock_for_star(path, key):
    c = path[1].client()
    sw = SlidingWindow(c)
    before = server_ms(c)
    r = sw.allow(key, Limit(60, 5), detail=True)
    after = server_ms(c)
    assert before <= r.now <= after
    assert scores(c, key) == [r.now]


def test_detail_over_several_keys(path, key):
    sw = SlidingWindow(path[1].client())
    user, tenant = f"{key}:user", f"{key}:tenant"
    keyed = {user: [Limit(1, 2), Limit(60, 5)], tenant: Limit(60, 3)}
    sw.allow_all(keyed, now=NOW)
    r = sw.allow_all(keyed, now=NOW + 10, detail=True)
    assert r == AllResult(True, 2, 0, 990, 1000, 0, user, Limit(1, 2), now=NOW + 10, states=(
        LimitState(2, 0, 990, 1000), LimitState(2, 3, 0, 60_000), LimitState(2, 1, 0, 60_000)))
    assert sw.peek_all(keyed, now=NOW + 10, detail=True).states == r.states


def test_lease_logs_at_its_end(path, key):
    c = path[1].client()
    sw = SlidingWindow(c)
    before = server_ms(c)
    r = sw.allow(key, Limit(60, 10), cost=4, now=NOW, lease=500)
    after = server_ms(c)
    assert r == Result(True, 4, 6, 0, 60_500, 0)
    assert scores(c, key) == [NOW + 500] * 4
    assert before + 60_500 <= c.pexpiretime(key) <= after + 60_500
    # A peek with LEASE answers what the allow would.
    assert sw.peek(key, Limit(60, 10), cost=6, now=NOW + 1, lease=500) == sw.allow(key, Limit(60, 10), cost=6, now=NOW + 1, lease=500)
    assert sw.refund(key, 4, at=NOW + 500) == 4
    assert scores(c, key) == [NOW + 501] * 6


def test_lease_and_detail_errors(path, key):
    sw = SlidingWindow(path[1].client())
    lease_err = "LEASE must be an integer between 1 and 9007199254740992 - now (now + LEASE <= 2^53)"
    for args in ([60, 5, NOW, "LEASE", 0], [60, 5, 9007199254740992, "LEASE", 1], [60, 5, NOW, "LEASE", "x"]):
        with pytest.raises(redis.ResponseError, match=lease_err.replace("(", r"\(").replace(")", r"\)").replace("^", r"\^").replace("+", r"\+")):
            sw.call("allow", key, args)
    with pytest.raises(redis.ResponseError, match="syntax error, option 'detail' given twice"):
        sw.call("allow", key, [60, 5, NOW, "DETAIL", "detail"])


PRECISION_ERR = "PRECISION must be an integer between 1 and 9007199254740992 (now + LEASE rounded up to a multiple of PRECISION <= 2^53)"


def test_precision_logs_at_rounded_up_times(path, key):
    c = path[1].client()
    sw = SlidingWindow(c)
    t = 1_700_000_000_000
    # Decided at now, logged at now rounded up to the second: docs/commands.md's example.
    before = server_ms(c)
    assert sw.allow(key, Limit(60, 3), now=t + 250, precision=1000) == Result(True, 1, 2, 0, 60_750, 0)
    after = server_ms(c)
    # The TTL is the window plus t - now from the server's clock (the second call's is shorter).
    assert before + 60_750 <= c.pexpiretime(key) <= after + 60_750
    assert sw.allow(key, Limit(60, 3), now=t + 700, precision=1000) == Result(True, 2, 1, 0, 60_300, 0)
    assert scores(c, key) == [t + 1000] * 2
    assert sw.peek(key, Limit(60, 3), cost=2, now=t + 60_999) == Result(False, 2, 1, 1, 1, 0)
    assert sw.peek(key, Limit(60, 3), cost=2, now=t + 61_000).allowed
    # With a lease, now + ms is rounded up; PEEK answers what ALLOW does; PRECISION 1 changes nothing.
    assert sw.peek(key, Limit(60, 9), now=t + 1_001, lease=500, precision=1000) == \
        sw.allow(key, Limit(60, 9), now=t + 1_001, lease=500, precision=1000)
    assert sw.allow(key, Limit(60, 9), now=t + 1_002, precision=1) == Result(True, 4, 5, 0, 60_998, 0)
    assert scores(c, key) == [t + 1000] * 2 + [t + 1_002, t + 2_000]
    # A caller takes such a request back at the same arithmetic.
    assert sw.refund(key, 1, at=t + 1_999) == 1 and scores(c, key) == [t + 1000] * 2 + [t + 2_000]
    # Over several keys every key's members are rounded alike.
    keyed = {f"{key}:a": Limit(60, 5), f"{key}:b": [Limit(1, 2), Limit(60, 5)]}
    r = sw.allow_all(keyed, cost=2, now=t + 3_001, precision=250, detail=True)
    assert (r.allowed, r.reset_after_ms, r.now) == (True, 1_249, t + 3_001)
    assert scores(c, f"{key}:a") == scores(c, f"{key}:b") == [t + 3_250] * 2
    assert sw.peek_all(keyed, cost=2, now=t + 3_002, precision=250) == sw.allow_all(keyed, cost=2, now=t + 3_002, precision=250)


def test_precision_errors(path, key):
    c = path[1].client()
    sw = SlidingWindow(c)
    keyed = {key: Limit(60, 5)}
    calls = (lambda p: sw.allow(key, Limit(60, 5), now=NOW, precision=p),
             lambda p: sw.peek(key, Limit(60, 5), now=NOW, precision=p),
             lambda p: sw.allow_all(keyed, now=NOW, precision=p),
             lambda p: sw.peek_all(keyed, now=NOW, precision=p))
    # Refused before anything is sent, as the module would refuse it.
    for bad in (0, -1, 9007199254740993, 1.5, "1000", True):
        for call in calls:
            with pytest.raises(ValueError, match="precision must be an integer between 1 and 9007199254740992"):
                call(bad)
    assert sw.peek(key, Limit(60, 5), now=NOW, precision=9007199254740992).allowed
    # The rounded score past 2^53 is the server's error on both paths, and changes nothing.
    escaped = PRECISION_ERR.replace("(", r"\(").replace(")", r"\)").replace("^", r"\^").replace("+", r"\+")
    for call in (lambda: sw.allow(key, Limit(60, 5), now=9007199254740991, precision=1000),
                 lambda: sw.peek_all(keyed, now=9007199254740000, lease=1, precision=1000),
                 lambda: sw.call("allow", key, [60, 5, NOW, "PRECISION", 0]),
                 lambda: sw.call("peek", key, [60, 5, NOW, "precision", "x"])):
        with pytest.raises(redis.ResponseError, match=escaped):
            call()
    with pytest.raises(redis.ResponseError, match="syntax error, option 'precision' given twice"):
        sw.call("allow", key, [60, 5, NOW, "PRECISION", 10, "precision", 10])
    assert c.exists(key) == 0


def test_precision_keeps_a_busy_keys_distinct_scores_bounded(path, key):
    """20,000 requests over 20 s of the callers' clock, window 10 s, PRECISION 1000: the key holds
    every request of its window but at most (Wmax + p) / p + 2 distinct scores, all multiples of p."""
    c = path[1].client()
    sw = SlidingWindow(c)
    most = 0
    check_every = 1000
    for i in range(20_000):
        r = sw.allow(key, Limit(10, 1_000_000), now=NOW + i, precision=1000)
        assert r.allowed
        if i % check_every == check_every - 1:
            logged = scores(c, key)
            distinct = set(logged)
            assert all(s % 1000 == 0 for s in distinct)
            assert len(distinct) <= 10_000 // 1000 + 1 + 2, (i, sorted(distinct))
            # Nothing over-trimmed: every request of the window (now - 10 s, now] is still there.
            assert len(logged) >= min(i + 1, 10_000)
            most = max(most, len(distinct))
    assert most >= 10


@pytest.mark.parametrize("lateness", [0, 5_000])
def test_lateness_keeps_members_longer(path, key, lateness):
    name, server = path
    c = server.client()
    if name == "module":
        c.config_set("slidingwindow.lateness", lateness)
    sw = SlidingWindow(c, lateness=lateness)
    try:
        c.zadd(key, {"old": NOW - 63_000, "older": NOW - 66_000})
        before = server_ms(c)
        r = sw.allow(key, Limit(60, 5), now=NOW)
        after = server_ms(c)
        # The counts are those of G = 0 whatever G; only what is kept and the TTL differ.
        assert r == Result(True, 1, 4, 0, 60_000, 0)
        kept = [NOW - 63_000, NOW] if lateness else [NOW]
        assert scores(c, key) == kept
        assert before + 60_000 + lateness <= c.pexpiretime(key) <= after + 60_000 + lateness
    finally:
        if name == "module":
            c.config_set("slidingwindow.lateness", 0)


# The lease object.


def test_lease_hands_out_exactly_max(path, key):
    c = path[1].client()
    sw = SlidingWindow(c)
    lease = sw.lease(key, Limit(60, 10), size=4, duration_ms=60_000)
    c.config_resetstat()
    got = [lease.allow() for _ in range(13)]
    assert [r.allowed for r in got] == [True] * 10 + [False] * 3
    # Two leases of 4, then a third refused (2 left): a lease of 2 takes the last two. All are
    # logged at their lease's end, a minute on.
    assert c.zcard(key) == 10
    ends = scores(c, key)
    assert ends == [got[0].now + 60_000] * 4 + [got[4].now + 60_000] * 4 + [got[8].now + 60_000] * 2
    # From memory: remaining counts the permits still held as free.
    assert [r.remaining for r in got[:4]] == [9, 8, 7, 6]
    assert [r.count for r in got[:4]] == [1, 2, 3, 4]
    assert all(r.now is not None and len(r.states) == 1 for r in got)
    # The first refusal is a PEEK's, remembered: the next ones come from memory, their wait
    # running down.
    assert got[10].retry_after_ms > 0 and got[10].remaining == 0
    assert got[10].retry_after_ms >= got[12].retry_after_ms > 0
    assert calls(c) == ({"allow": 4, "peek": 1} if path[0] == "module" else {"script": 5})
    assert lease.close() == 0


def test_lease_gives_back_what_it_did_not_hand_out(path, key):
    c = path[1].client()
    sw = SlidingWindow(c)
    with sw.lease(key, [Limit(1, 100), Limit(60, 1000)], size=10, duration_ms=60_000) as lease:
        first = lease.allow()
        for _ in range(2):
            assert lease.allow().allowed
        assert lease.permits == 7
        [end] = set(scores(c, key))
        assert end == first.now + 60_000 - 0 and c.zcard(key) == 10
    # close(): the seven unused went back, at the lease's end.
    assert scores(c, key) == [end] * 3
    assert lease.close() == 0
    # At the end of a lease its unused permits go back by themselves.
    lease = sw.lease(key, Limit(60, 1000), size=10, duration_ms=50)
    assert lease.allow().allowed
    wait_for("the unused permits refunded at the lease's end", lambda: c.zcard(key) == 4)
    assert lease.permits == 0


def test_lease_refusals_are_remembered_until_their_wait(path, key):
    c = path[1].client()
    sw = SlidingWindow(c)
    # A lease of 5 can never fit a max of 3: an error, not a fallback.
    with pytest.raises(ValueError, match="smallest max, 3"):
        sw.lease(key, [Limit(60, 5), Limit(60, 3)], size=5, duration_ms=1_000)
    assert sw.allow(key, Limit(1, 10), cost=8).allowed
    lease = sw.lease(key, Limit(1, 10), size=5, duration_ms=60_000)
    c.config_resetstat()
    # The lease of 5 is refused, one of the 2 left is taken; a PEEK then finds none left.
    got = [lease.allow() for _ in range(3)]
    assert [r.allowed for r in got] == [True, True, False]
    refused = got[2]
    # Until its wait has passed, every request is refused from memory.
    for _ in range(50):
        r = lease.allow()
        assert not r.allowed and 0 < r.retry_after_ms <= refused.retry_after_ms and r.remaining == 0
    want = {"allow": 2, "peek": 1} if path[0] == "module" else {"script": 3}
    assert calls(c) == want
    # After the wait (the 8 exact permits leave a second after they were logged), leases again.
    wait_for("a lease once the wait has passed", lambda: lease.allow().allowed, 5.0)
    assert lease.permits >= 1
    lease.close()


def test_lease_forgets_what_it_knew_on_its_own_refund(path, key):
    c = path[1].client()
    sw = SlidingWindow(c)
    assert sw.allow(key, Limit(60, 10), cost=5).allowed
    lease = sw.lease(key, Limit(60, 10), size=5, duration_ms=200)
    c.config_resetstat()
    # A lease of the 5 left: no whole lease fits after it for a minute.
    assert lease.allow().allowed
    wait_for("the 4 unused refunded at the lease's end", lambda: c.zcard(key) == 6)
    # That refund made room: the next request leases at once (5 refused, then the 4 left),
    # without a PEEK first.
    assert lease.allow().allowed and lease.permits == 3
    assert calls(c) == ({"allow": 3, "refund": 1} if path[0] == "module" else {"script": 4})
    lease.close()


def test_lease_on_the_callers_clock(path, key):
    c = path[1].client()
    sw = SlidingWindow(c)
    with pytest.raises(ValueError, match="clock must be a callable"):
        sw.lease(key, Limit(60, 10), size=4, duration_ms=60_000, clock=NOW)
    at = [NOW]
    # A clock far from the server's: every call passes it as now, and the lease times itself by
    # it (the lease's end, its remembered refusal), not by the time that passes meanwhile.
    lease = sw.lease(key, Limit(60, 10), size=4, duration_ms=60_000, clock=lambda: at[0])
    c.config_resetstat()
    r = lease.allow()
    assert (r.allowed, r.count, r.remaining, r.retry_after_ms, r.reset_after_ms, r.now) == (True, 1, 9, 0, 120_000, NOW)
    assert scores(c, key) == [NOW + 60_000] * 4
    at[0] = NOW + 59_999  # the last ms of the lease on its clock: from memory, its waits run down
    r = lease.allow()
    assert (r.allowed, r.count, r.remaining, r.reset_after_ms, r.now) == (True, 2, 8, 60_001, NOW + 59_999)
    assert lease.permits == 2
    at[0] = NOW + 60_000  # its end: the 2 unused go back, and a new lease is taken at that now
    assert lease.permits == 0
    r = lease.allow()
    assert (r.allowed, r.count, r.remaining, r.now) == (True, 3, 7, NOW + 60_000)
    assert scores(c, key) == [NOW + 60_000] * 2 + [NOW + 120_000] * 4
    # Another client takes the rest; the lease hands out its 3, then a PEEK learns the wait.
    assert sw.allow(key, Limit(60, 10), cost=4, now=NOW + 60_000).allowed
    assert all(lease.allow().allowed for _ in range(3))
    refused = lease.allow()
    assert not refused.allowed and refused.now == NOW + 60_000 and refused.retry_after_ms > 0
    sent = NOW + 60_000
    # Remembered until sent + retry_after_ms on the lease's clock, its wait running down.
    at[0] = sent + refused.retry_after_ms - 1
    r = lease.allow()
    assert (r.allowed, r.retry_after_ms, r.now) == (False, 1, at[0])
    assert calls(c) == ({"allow": 4, "peek": 1, "refund": 1} if path[0] == "module" else {"script": 6})
    at[0] = sent + refused.retry_after_ms  # the wait is over: a new lease
    r = lease.allow()
    assert r.allowed and r.now == at[0] and lease.permits == 3
    assert calls(c) == ({"allow": 5, "peek": 1, "refund": 1} if path[0] == "module" else {"script": 7})
    assert lease.close() == 3
    assert max(scores(c, key)) == at[0] + 60_000


def test_lease_shared_by_threads_never_exceeds(path, key):
    c = path[1].client()
    sw = SlidingWindow(c)
    lease = sw.lease(key, Limit(1, 50), size=10, duration_ms=100)
    served = []
    lock = threading.Lock()
    stop = time.monotonic() + 2.5

    def worker():
        while time.monotonic() < stop:
            r = lease.allow()
            if r.allowed:
                # The time the lease says it handed the permit out at (the server's clock): a
                # clock read here can lag the handout by the other threads' turns.
                assert r.now is not None
                with lock:
                    served.append(r.now)

    threads = [threading.Thread(target=worker) for _ in range(16)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    lease.close()
    assert busiest(sorted(served), 1_000) <= 50
    assert busiest(scores(c, key), 1_000) <= 50
    assert len(served) >= 50


def busiest(times, window_ms: int) -> int:
    """The most times in any window (a, a + window]."""
    most, lo = 0, 0
    for hi, t in enumerate(times):
        while times[lo] <= t - window_ms:
            lo += 1
        most = max(most, hi - lo + 1)
    return most


# Headers: what spec/headers.json (tests/test_headers.py) cannot say: default names, rounding
# near 2**63, the forms of keyed limits.


def test_headers_are_the_gateways():
    limits = [Limit(1, 10), Limit(60, 100)]
    assert policy_header(limits) == '"l0";q=10;w=1,"l1";q=100;w=60'
    refused = Result(False, 100, 0, 1001, 59_000, 1)
    assert ratelimit_header(refused) == '"l1";r=0;t=59'
    assert retry_after_header(refused) == "2"
    assert retry_after_header(Result(False, 1, 0, -1, 5, 0)) is None
    for ms, s in [(-1, 0), (0, 0), (1, 1), (999, 1), (1000, 1), (1001, 2), (60_000, 60), (2**63 - 1, (2**63 - 1) // 1000 + 1)]:
        assert seconds_up(ms) == s, ms
    # allow_all's limits, key by key.
    keyed = {"rl:{acme}:u": [Limit(1, 10)], "rl:{acme}": Limit(60, 1000)}
    assert policy_header(keyed, ["user-1s", "tenant-1m"]) == '"user-1s";q=10;w=1,"tenant-1m";q=1000;w=60'
    assert policy_header(list(keyed.items())) == '"l0";q=10;w=1,"l1";q=1000;w=60'


def test_canonical_ip():
    for given, want in {
        "10.1.2.3": "10.1.2.3",
        "::ffff:127.0.0.1": "127.0.0.1",
        "::FFFF:10.1.2.3": "10.1.2.3",
        "::ffff:7f00:1": "127.0.0.1",
        "0:0:0:0:0:ffff:7f00:1": "127.0.0.1",
        "0000:0000:0000:0000:0000:FFFF:7F00:0001": "127.0.0.1",
        "2001:DB8:0:0:0:0:0:1": "2001:db8::1",
        "2001:db8::ffff:1.2.3.4": "2001:db8::ffff:102:304",
        "::1": "::1",
        "x": "x",
        "": "",
    }.items():
        assert canonical_ip(given) == want, given
