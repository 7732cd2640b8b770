"""Redis down, slow, read-only or without replicas: the call timeout, on_error and confirm."""

from __future__ import annotations

import pytest
import redis

from slidingwindow import Limit, Result, SlidingWindow, UnavailableError, headers
from slidingwindow_testkit import Server


@pytest.fixture(params=["module", "lua"])
def own_server(request):
    """A server of the test's own, which it may stop or pause."""
    s = Server(with_module=request.param == "module")
    yield s
    s.close()


def test_redis_down_closed_raises_open_lets_through(own_server, key):
    c = own_server.client()
    closed = SlidingWindow(c)
    opened = SlidingWindow(c, on_error="open")
    assert closed.allow(key, Limit(60, 1)).allowed and opened.allow(key, Limit(60, 1)).allowed is False
    own_server.stop()
    with pytest.raises(UnavailableError) as e:
        closed.allow(key, Limit(60, 1))
    assert isinstance(e.value.__cause__, redis.ConnectionError)
    r = opened.allow(key, Limit(60, 1))
    assert r.allowed and isinstance(r.error, UnavailableError)
    assert headers(r, Limit(60, 1)) == {}
    assert opened.allow_all({key: Limit(60, 1)}).error is not None
    assert opened.peek(key, Limit(60, 1)).allowed
    # A refund has nothing to let through: it raises.
    with pytest.raises(UnavailableError):
        opened.refund(key)


def test_a_paused_server_times_out(own_server, key):
    c = own_server.client()
    sw = SlidingWindow(c, timeout=0.2)
    assert sw.allow(key, Limit(60, 5)).allowed
    # WRITE: the pause holds ALLOW (and the script) but not the CLIENT UNPAUSE below.
    c.client_pause(30_000, all=False)
    try:
        with pytest.raises(UnavailableError) as e:
            sw.allow(key, Limit(60, 5))
        assert isinstance(e.value.__cause__, redis.TimeoutError)
    finally:
        c.client_unpause()
    # The timed-out call's connection was dropped (whether the server ran it is the server's
    # business); the next call gets its own answer, not the timed-out one's.
    r = sw.allow(key, Limit(60, 5), detail=True)
    assert r.count in (2, 3) and r.now is not None


def test_a_replica_answers_readonly_as_unavailable(own_server, key):
    replica = Server(with_module=own_server.with_module, extra=["--replicaof", "127.0.0.1", str(own_server.port)])
    try:
        rc = replica.linked()
        sw = SlidingWindow(rc)
        with pytest.raises(UnavailableError, match="read only"):
            sw.allow(key, Limit(60, 5))
        assert SlidingWindow(rc, on_error="open").allow(key, Limit(60, 5)).error is not None
        # PEEK runs on a replica.
        assert sw.peek(key, Limit(60, 5), now=1_700_000_000_000) == Result(True, 1, 4, 0, 60_000, 0)
    finally:
        replica.close()


def test_confirm_without_a_replica(own_server, key):
    c = own_server.client()
    deny = SlidingWindow(c, confirm=(1, 20))
    r = deny.allow(key, Limit(60, 5), detail=True)
    # WAIT found no replica: the charge was taken back.
    assert (r.allowed, r.confirmed, r.count) == (False, False, 1)
    assert c.exists(key) == 0
    # Taken back at the score it was logged with: now + ms rounded up to the precision.
    r = deny.allow(key, Limit(60, 5), lease=250, precision=100_000)
    assert (r.allowed, r.confirmed) == (False, False)
    assert c.exists(key) == 0
    allow = SlidingWindow(c, confirm=(1, 20), on_unconfirmed="allow")
    r = allow.allow(key, Limit(60, 5))
    assert (r.allowed, r.confirmed, r.states) == (True, False, None)
    assert c.zcard(key) == 1
    # Over several keys, every key's charge goes back; a refusal is never WAITed for.
    keyed = {f"{key}:a": Limit(60, 5), f"{key}:b": Limit(60, 5)}
    assert deny.allow_all(keyed, cost=2).confirmed is False
    assert c.exists(f"{key}:a", f"{key}:b") == 0
    assert deny.allow(key, Limit(60, 1)).confirmed is None
    # A lease refused for want of a replica falls back to exact calls, refused the same way.
    lease = deny.lease(f"{key}:l", Limit(60, 100), size=10, duration_ms=1000)
    assert lease.allow().confirmed is False and c.exists(f"{key}:l") == 0


def test_confirm_with_a_replica(own_server, key):
    c = own_server.client()
    replica = Server(with_module=own_server.with_module, extra=["--replicaof", "127.0.0.1", str(own_server.port)])
    try:
        rc = replica.linked()
        sw = SlidingWindow(c, confirm=(1, 5_000))
        got = [sw.allow(key, Limit(60, 3)) for _ in range(4)]
        assert [(r.allowed, r.confirmed) for r in got] == [(True, True)] * 3 + [(False, None)]
        # Acknowledged: the replica holds them already.
        assert rc.zcard(key) == 3
        assert sw.allow_all({f"{key}:x": Limit(60, 3)}).confirmed
    finally:
        replica.close()


def test_settings_are_checked(plain_server):
    c = plain_server.client()
    for kwargs in ({"on_error": "maybe"}, {"on_unconfirmed": "x"}, {"timeout": 0}, {"lateness": -1},
                   {"lateness": 86_400_001}, {"confirm": (0, 10)}, {"confirm": (1, -1)}):
        with pytest.raises(ValueError):
            SlidingWindow(c, **kwargs)
    with pytest.raises(ValueError):
        SlidingWindow(c).lease("k", Limit(1, 1), size=0, duration_ms=10)
