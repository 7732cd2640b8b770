"""The helper on both paths: a server with the module, and one without it (the Lua script)."""

from __future__ import annotations

import pytest
import redis

from slidingwindow import CROCKFORD, AllResult, Limit, Result, SlidingWindow, SlidingWindowError, TopEntry

NOW = 1_700_000_000_000
WINDOW_ERR = "window must be an integer between 1 and 9007199254740 (window * 1000 <= 2^53)"
MAX_ERR = "max must be an integer between 1 and 9007199254740992"


def server_ms(c: redis.Redis) -> int:
    secs, micros = c.time()
    return secs * 1000 + micros // 1000


def error_of(sw: SlidingWindow, command: str, key: str, args) -> str:
    with pytest.raises(redis.ResponseError) as e:
        sw.call(command, key, args)
    return str(e.value)


def ulid_ms(member: bytes) -> int:
    text = member.decode()
    assert len(text) == 26 and set(text) <= set(CROCKFORD) and text[0] <= "7", text
    ms = 0
    for ch in text[:10]:
        ms = ms * 32 + CROCKFORD.index(ch)
    return ms


def test_path_is_detected_once(path, key):
    name, server = path
    c = server.client()
    c.config_resetstat()
    sw = SlidingWindow(c)
    for i in range(3):
        assert sw.allow(key, Limit(60, 10), now=NOW + i).allowed
    assert sw.uses_module == (name == "module")
    stats = c.info("commandstats")
    assert stats["cmdstat_command|info"]["calls"] == 1
    if name == "module":
        assert stats["cmdstat_slidingwindow.allow"]["calls"] == 3
        assert "cmdstat_evalsha" not in stats
    else:
        assert stats["cmdstat_evalsha"]["calls"] >= 3


def test_burst_admits_exactly_max(path, key):
    sw = SlidingWindow(path[1].client())
    got = [sw.allow(key, Limit(60, 5), now=NOW + i) for i in range(6)]
    assert [r.allowed for r in got] == [True] * 5 + [False]
    assert got[0] == Result(True, 1, 4, 0, 60_000, 0)
    assert got[4] == Result(True, 5, 0, 59_996, 60_000, 0)
    # Refused: the oldest (at NOW) leaves the window at NOW + 60 s.
    assert got[5] == Result(False, 5, 0, 59_995, 59_999, 0)
    # Exactly at that instant the oldest has left (trim is score <= now - window).
    assert sw.allow(key, (60, 5), now=NOW + 60_000) == Result(True, 5, 0, 1, 60_000, 0)
    assert path[1].client().zcard(key) == 5


def test_peek_changes_nothing(path, key):
    sw = SlidingWindow(path[1].client())
    c = path[1].client()
    sw.allow(key, Limit(60, 3), now=NOW)
    before = (c.dump(key), c.pexpiretime(key))
    peeked = sw.peek(key, Limit(60, 3), cost=2, now=NOW + 10)
    assert (c.dump(key), c.pexpiretime(key)) == before
    assert peeked == Result(True, 3, 0, 60_000, 60_000, 0)
    assert sw.allow(key, Limit(60, 3), cost=2, now=NOW + 10) == peeked
    assert sw.peek("rl:{missing}", Limit(60, 3), now=NOW) == Result(True, 1, 2, 0, 60_000, 0)
    assert c.exists("rl:{missing}") == 0


def test_cost_and_never_admissible(path, key):
    sw = SlidingWindow(path[1].client())
    assert sw.allow(key, Limit(10, 5), cost=3, now=NOW) == Result(True, 3, 2, 10_000, 10_000, 0)
    assert sw.allow(key, Limit(10, 5), cost=3, now=NOW + 1) == Result(False, 3, 2, 9_999, 9_999, 0)
    assert sw.allow(key, Limit(10, 5), cost=6, now=NOW + 1) == Result(False, 3, 2, -1, 9_999, 0)


def test_members_are_ulids_of_now(path, key):
    sw = SlidingWindow(path[1].client())
    c = path[1].client()
    sw.allow(key, Limit(60, 10), cost=4, now=NOW)
    sw.allow(key, Limit(60, 10), cost=2, now=NOW + 7)
    pairs = c.zrange(key, 0, -1, withscores=True)
    assert len(pairs) == 6 and len({m for m, _ in pairs}) == 6
    for member, score in pairs:
        assert ulid_ms(member) == int(score)


def test_ttl_is_one_window_from_the_server_clock(path, key):
    sw = SlidingWindow(path[1].client())
    c = path[1].client()
    before = server_ms(c)
    sw.allow(key, Limit(60, 1), now=NOW)
    after = server_ms(c)
    assert before + 60_000 <= c.pexpiretime(key) <= after + 60_000
    # A refused call leaves the TTL alone.
    expiry = c.pexpiretime(key)
    assert not sw.allow(key, Limit(60, 1), now=NOW + 1).allowed
    assert c.pexpiretime(key) == expiry


def test_now_from_the_server_clock(path, key):
    sw = SlidingWindow(path[1].client())
    c = path[1].client()
    before = server_ms(c)
    assert sw.allow(key, Limit(60, 5)).allowed
    after = server_ms(c)
    [(_, score)] = c.zrange(key, 0, -1, withscores=True)
    assert before <= score <= after


def test_refused_call_still_trims(path, key):
    sw = SlidingWindow(path[1].client())
    c = path[1].client()
    c.zadd(key, {"old": NOW - 60_000, "kept": NOW - 59_999})
    assert sw.allow(key, Limit(60, 1), now=NOW) == Result(False, 1, 0, 1, 1, 0)
    assert c.zrange(key, 0, -1) == [b"kept"]


def test_hand_written_scores(path, key):
    """Fractional and future scores, as another writer may leave them, count as the contract says."""
    sw = SlidingWindow(path[1].client())
    c = path[1].client()
    c.zadd(key, {"a": NOW - 500.5, "future": NOW + 5_000})
    assert sw.peek(key, Limit(1, 2), now=NOW) == Result(False, 2, 0, 500, 6_000, 0)
    assert sw.allow(key, Limit(1, 3), now=NOW) == Result(True, 3, 0, 500, 6_000, 0)


@pytest.mark.parametrize(
    "args, want",
    [
        (["x", 5, 1], "ERR " + WINDOW_ERR),
        ([0, 5, 1], "ERR " + WINDOW_ERR),
        ([9_007_199_254_741, 5, 1], "ERR " + WINDOW_ERR),
        ([10, 0, 1], "ERR " + MAX_ERR),
        ([10, "9007199254740993", 1], "ERR " + MAX_ERR),
        ([10, 5, "-1"], "ERR now must be an integer between 0 and 9007199254740992, or *"),
        ([10, 5, "1.5"], "ERR now must be an integer between 0 and 9007199254740992, or *"),
        ([10, 5, 1, "COST", 0], "ERR cost must be an integer between 1 and 9007199254740992"),
        ([10, 5, 1, "COST"], "ERR syntax error, option 'COST' needs a value"),
        ([10, 5, 1, "cost", 1, "CoSt", 2], "ERR syntax error, option 'CoSt' given twice"),
        ([10, 5, 1, "FOO", 1], "ERR syntax error, unknown option 'FOO'"),
        ([10, 5, 1, b"\r\n\x00\xff"], "ERR syntax error, unknown option '\\x0d\\x0a\\x00\\xff'"),
        ([10, 5, 1, "B" * 65], "ERR syntax error, unknown option '" + "B" * 64 + "...'"),
        ([10, 200_000, 1, "COST", 100_001], "ERR cost 100001 would add more than 100000 members in one call"),
        ([10, 5], "ERR wrong number of arguments for 'slidingwindow.{command}' command"),
    ],
)
@pytest.mark.parametrize("command", ["allow", "peek"])
def test_errors_are_exact(path, key, command, args, want):
    sw = SlidingWindow(path[1].client())
    c = path[1].client()
    c.zadd(key, {"m": NOW})
    before = c.dump(key)
    # redis-py drops the "ERR " prefix from the exception text.
    assert error_of(sw, command, key, args) == want.format(command=command).removeprefix("ERR ")
    assert c.dump(key) == before


def test_wrong_type(path, key):
    sw = SlidingWindow(path[1].client())
    path[1].client().set(key, "x")
    assert error_of(sw, "allow", key, [10, 5, 1]).startswith("WRONGTYPE Operation against a key")


def test_oversized_cost_is_fine_when_refused(path, key):
    # 100,000 members in one call: no bound on its time (the default 1 s is a timing threshold
    # on a loaded machine).
    sw = SlidingWindow(path[1].client(), timeout=None)
    assert sw.allow(key, Limit(10, 100_000), cost=100_001, now=NOW) == Result(False, 0, 100_000, -1, 0, 0)
    assert sw.allow(key, Limit(10, 100_000), cost=100_000, now=NOW).count == 100_000
    assert path[1].client().zcard(key) == 100_000


# Several limits (LIMIT): the module gains them in its own change; these tests hold both paths to them.


def test_second_limit_binds_when_the_first_has_room(path, key):
    sw = SlidingWindow(path[1].client())
    limits = [Limit(1, 3), Limit(60, 5)]
    got = [sw.allow(key, limits, now=NOW) for _ in range(4)]
    assert got[2] == Result(True, 3, 0, 1_000, 1_000, 0)
    assert got[3] == Result(False, 3, 0, 1_000, 1_000, 0)
    # One second on, the short window is empty; two more fill the long one.
    assert sw.allow(key, limits, now=NOW + 1_000) == Result(True, 4, 1, 0, 60_000, 1)
    assert sw.allow(key, limits, now=NOW + 1_000) == Result(True, 5, 0, 59_000, 60_000, 1)
    assert sw.allow(key, limits, now=NOW + 1_000) == Result(False, 5, 0, 59_000, 60_000, 1)
    # The binding limit's reply carries a sixth integer even when it is the positional one.
    assert sw.call("peek", key, [1, 3, NOW + 1_000, "LIMIT", 60, 5]) == [0, 5, 0, 59_000, 60_000, 1]
    assert sw.call("peek", key, [60, 5, NOW + 1_000, "LIMIT", 60, 5]) == [0, 5, 0, 59_000, 60_000, 0]


def test_ties_between_limits(path, key):
    sw = SlidingWindow(path[1].client())
    sw.allow(key, Limit(60, 9), now=NOW - 15_000)
    sw.allow(key, Limit(60, 9), now=NOW)
    # At NOW a 10 s window holds one member, a 20 s window two.
    # Equal remaining and retry: the longer window binds; equal windows: the earlier position.
    assert sw.peek(key, [Limit(10, 3), Limit(20, 4)], now=NOW).limit == 1
    assert sw.peek(key, [Limit(20, 4), Limit(20, 4)], now=NOW).limit == 0
    # Equal remaining: the longer wait binds, even for the shorter window...
    assert sw.peek(key, [Limit(10, 1), Limit(20, 2)], now=NOW) == Result(False, 1, 0, 10_000, 10_000, 0)
    assert sw.peek(key, [Limit(20, 2), Limit(10, 1)], now=NOW) == Result(False, 1, 0, 10_000, 10_000, 1)
    # ...and -1 (never admissible) counts as the longest wait.
    assert sw.peek(key, [Limit(10, 3), Limit(20, 4)], cost=4, now=NOW) == Result(False, 1, 2, -1, 10_000, 0)
    assert sw.peek(key, [Limit(20, 4), Limit(10, 3)], cost=4, now=NOW) == Result(False, 1, 2, -1, 10_000, 1)


def test_ttl_is_the_longest_window(path, key):
    sw = SlidingWindow(path[1].client())
    c = path[1].client()
    before = server_ms(c)
    sw.allow(key, [Limit(1, 10), Limit(3600, 100), Limit(60, 50)], now=NOW)
    after = server_ms(c)
    assert before + 3_600_000 <= c.pexpiretime(key) <= after + 3_600_000


@pytest.mark.parametrize(
    "args, want",
    [
        ([10, 5, 1, "LIMIT"], "ERR syntax error, option 'LIMIT' needs two values"),
        ([10, 5, 1, "limit", 5], "ERR syntax error, option 'limit' needs two values"),
        ([10, 5, 1, "LIMIT", 0, 5], "ERR LIMIT " + WINDOW_ERR),
        ([10, 5, 1, "LIMIT", "x", 5], "ERR LIMIT " + WINDOW_ERR),
        ([10, 5, 1, "LIMIT", 5, 0], "ERR LIMIT " + MAX_ERR),
        ([10, 5, 1, "LIMIT", 5, "9007199254740993"], "ERR LIMIT " + MAX_ERR),
        ([10, 5, 1] + ["LIMIT", 1, 1] * 16, "ERR syntax error, at most 16 limits in one call"),
        ([10, 5, 1, "LIMIT", 5, 5, "COST", 2, "COST", 1], "ERR syntax error, option 'COST' given twice"),
    ],
)
def test_limit_errors_are_exact(path, key, args, want):
    sw = SlidingWindow(path[1].client())
    assert error_of(sw, "allow", key, args) == want.removeprefix("ERR ")
    assert path[1].client().exists(key) == 0


def test_sixteen_limits_in_any_order(path, key):
    sw = SlidingWindow(path[1].client())
    args = [10, 5, NOW, "LIMIT", 1, 1] + ["limit", 20, 9] * 14 + ["COST", 1]
    assert sw.call("allow", key, args) == [1, 1, 0, 1_000, 1_000, 1]


# Several keys (ALLOWALL, PEEKALL) and refunds (REFUND): the module gains them in its own change;
# these tests hold both paths to the contract's sections "Several keys" and "Refunds".


def test_allow_all_charges_every_key_or_none(path, key):
    sw = SlidingWindow(path[1].client())
    c = path[1].client()
    tenant, alice, bob = f"{key}:tenant", f"{key}:alice", f"{key}:bob"
    per_user = [Limit(1, 10), Limit(60, 2)]
    for i in range(2):
        r = sw.allow_all({alice: per_user, tenant: Limit(60, 3)}, now=NOW + i)
        assert r.allowed, r
    # Alice's minute is full: she binds, and the tenant is not charged for her refusal.
    r = sw.allow_all({alice: per_user, tenant: Limit(60, 3)}, now=NOW + 2)
    assert r == AllResult(False, 2, 0, 59_998, 59_999, 1, alice, Limit(60, 2))
    assert (c.zcard(alice), c.zcard(tenant)) == (2, 2)
    # Bob takes the tenant's last request; then the tenant binds for Bob.
    assert sw.allow_all([(bob, per_user), (tenant, [Limit(60, 3)])], now=NOW + 3).allowed
    r = sw.allow_all([(bob, per_user), (tenant, [Limit(60, 3)])], now=NOW + 4)
    assert (r.allowed, r.binding_key, r.binding_limit, r.limit, r.remaining) == (False, tenant, Limit(60, 3), 2, 0)
    assert r.retry_after_ms == 59_996
    assert (c.zcard(bob), c.zcard(tenant)) == (1, 3)


def test_allow_all_sets_each_keys_ttl(path, key):
    sw = SlidingWindow(path[1].client())
    c = path[1].client()
    before = server_ms(c)
    sw.allow_all({f"{key}:a": [Limit(1, 5), Limit(60, 9)], f"{key}:b": Limit(3600, 9)}, cost=2, now=NOW)
    after = server_ms(c)
    assert before + 60_000 <= c.pexpiretime(f"{key}:a") <= after + 60_000
    assert before + 3_600_000 <= c.pexpiretime(f"{key}:b") <= after + 3_600_000
    assert c.zcard(f"{key}:a") == c.zcard(f"{key}:b") == 2


def test_allow_all_with_one_key_answers_as_allow(path, key):
    sw = SlidingWindow(path[1].client())
    limits = [Limit(1, 2), Limit(60, 3)]
    for i in range(5):
        want = sw.call("peek", key, [1, 2, NOW + i * 300, "LIMIT", 60, 3])
        assert sw.call_keys("peekall", [1, key, NOW + i * 300, "LIMIT", 1, 1, 2, "LIMIT", 1, 60, 3]) == want
        r = sw.allow_all({key: limits}, now=NOW + i * 300)
        assert [int(r.allowed), r.count, r.remaining, r.retry_after_ms, r.reset_after_ms, r.limit] == want
        assert r.binding_key == key and r.binding_limit == limits[r.limit]
    # A single-limit key still gets the sixth integer.
    assert sw.call_keys("peekall", [1, key, NOW, "LIMIT", 1, 60, 9]) == [1, 4, 5, 0, 61_200, 0]


def test_peek_all_changes_nothing(path, key):
    sw = SlidingWindow(path[1].client())
    c = path[1].client()
    a, b = f"{key}:a", f"{key}:b"
    sw.allow_all({a: Limit(60, 3), b: Limit(60, 5)}, now=NOW)
    c.zadd(a, {"old": NOW - 120_000})
    before = [(c.dump(k), c.pexpiretime(k)) for k in (a, b)]
    peeked = sw.peek_all({a: Limit(60, 3), b: Limit(60, 5)}, cost=2, now=NOW + 10)
    assert [(c.dump(k), c.pexpiretime(k)) for k in (a, b)] == before
    assert peeked == AllResult(True, 3, 0, 60_000, 60_000, 0, a, Limit(60, 3))
    assert sw.allow_all({a: Limit(60, 3), b: Limit(60, 5)}, cost=2, now=NOW + 10) == peeked


def test_allow_all_wrong_type_on_the_third_key_changes_nothing(path, key):
    sw = SlidingWindow(path[1].client())
    c = path[1].client()
    keys = [f"{key}:{i}" for i in range(3)]
    sw.allow(keys[0], Limit(60, 9), now=NOW - 120_000)
    c.set(keys[2], "x")
    before = c.dump(keys[0])
    with pytest.raises(redis.ResponseError) as e:
        sw.allow_all({k: Limit(60, 9) for k in keys}, now=NOW)
    assert str(e.value).startswith("WRONGTYPE Operation against a key")
    # Not even the trim of the first key's expired member.
    assert c.dump(keys[0]) == before and c.exists(keys[1]) == 0


KEYNO_ERR = "LIMIT keyno must be an integer between 1 and numkeys ({})"
NUMKEYS_ERR = "numkeys must be an integer between 1 and 16, followed by that many keys and now"


@pytest.mark.parametrize(
    "args, want",
    [
        ([], "wrong number of arguments for 'slidingwindow.{command}' command"),
        (["x", "k1", 1, "LIMIT", 1, 1, 1], NUMKEYS_ERR),
        ([0, "k1", 1, "LIMIT", 1, 1, 1], NUMKEYS_ERR),
        ([17] + [f"k{i}" for i in range(17)] + [1], NUMKEYS_ERR),
        # numkeys past the end, or leaving no now.
        ([7, "k1", "k2", "k3", "k4", "k5", "k6"], NUMKEYS_ERR),
        ([6, "k1", "k2", "k3", "k4", "k5", "k6"], NUMKEYS_ERR),
        # Fewer than numkeys key now LIMIT keyno window max.
        ([1, "k1", 1, "LIMIT", 1, 1], "wrong number of arguments for 'slidingwindow.{command}' command"),
        ([2, "k1", "k1", 1, "LIMIT", 1, 1, 1], "key 2 is key 1 again: the keys of one call must be distinct"),
        ([1, "k1", "-1", "LIMIT", 1, 1, 1], "now must be an integer between 0 and 9007199254740992, or *"),
        ([2, "k1", "k2", 1, "LIMIT", 1, 1, 1], "key 2 has no LIMIT: every key needs at least one"),
        ([2, "k1", "k2", 1, "LIMIT", 2, 1, 1], "key 1 has no LIMIT: every key needs at least one"),
        ([1, "k1", 1, "COST", 1, "LIMIT", 1, 1], "syntax error, option 'LIMIT' needs three values (keyno window max)"),
        ([2, "k1", "k2", 1, "LIMIT", 3, 1, 1], KEYNO_ERR.format(2)),
        ([2, "k1", "k2", 1, "LIMIT", 0, 1, 1], KEYNO_ERR.format(2)),
        ([1, "k1", 1, "LIMIT", 1, 0, 1], "LIMIT " + WINDOW_ERR),
        ([1, "k1", 1, "LIMIT", 1, 1, 0], "LIMIT " + MAX_ERR),
        ([1, "k1", 1] + ["LIMIT", 1, 1, 1] * 17, "syntax error, at most 16 limits on one key (key 1)"),
        ([1, "k1", 1, "LIMIT", 1, 1, 1, "COST", 1, "cost", 2], "syntax error, option 'cost' given twice"),
        ([1, "k1", 1, "LIMIT", 1, 1, 1, "NOPE"], "syntax error, unknown option 'NOPE'"),
        ([1, "k1", 1, "LIMIT", 1, 1, 1, "LIMIT", 1, 1], "syntax error, option 'LIMIT' needs three values (keyno window max)"),
        ([1, "k1", 1, "LIMIT", 1, 10, 200_000, "COST", 100_001], "cost 100001 would add more than 100000 members in one call"),
    ],
)
@pytest.mark.parametrize("command", ["allowall", "peekall"])
def test_allow_all_errors_are_exact(path, key, command, args, want):
    sw = SlidingWindow(path[1].client())
    c = path[1].client()
    args = [f"{key}:{a}" if isinstance(a, str) and a.startswith("k") else a for a in args]
    c.zadd(f"{key}:k1", {"m": NOW - 100_000})
    before = c.dump(f"{key}:k1")
    with pytest.raises(redis.ResponseError) as e:
        sw.call_keys(command, args)
    # PEEKALL answers what ALLOWALL would, errors included.
    assert str(e.value) == want.format(command=command)
    assert c.dump(f"{key}:k1") == before
    assert c.exists(f"{key}:k2") == 0


def test_sixteen_keys_sixteen_limits_each(path, key):
    sw = SlidingWindow(path[1].client())
    c = path[1].client()
    limits = {f"{key}:{k}": [Limit(60 + i, 100 - k) for i in range(16)] for k in range(16)}
    r = sw.allow_all(limits, cost=3, now=NOW)
    # Least remaining: key 15 (max 85); ties go to the longer window, its last limit.
    assert r == AllResult(True, 3, 82, 0, 75_000, 255, f"{key}:15", Limit(75, 85))
    assert all(c.zcard(k) == 3 for k in limits)


def test_refund_takes_back_the_newest(path, key):
    sw = SlidingWindow(path[1].client())
    c = path[1].client()
    for i in range(4):
        sw.allow(key, Limit(60, 10), now=NOW + i * 10)
    assert sw.refund(key) == 1
    assert [s for _, s in c.zrange(key, 0, -1, withscores=True)] == [NOW, NOW + 10, NOW + 20]
    # AT: only members logged at or before it, the newest of those first.
    sw.allow(key, Limit(60, 10), now=NOW + 30)
    expiry = c.pexpiretime(key)
    assert sw.refund(key, 1, at=NOW + 15) == 1
    assert [s for _, s in c.zrange(key, 0, -1, withscores=True)] == [NOW, NOW + 20, NOW + 30]
    assert sw.refund(key, 5, at=NOW - 1) == 0
    # A refund neither trims nor touches the TTL.
    assert sw.refund(key, 2, at="*") == 2
    assert c.pexpiretime(key) == expiry
    assert sw.allow(key, Limit(60, 10), now=NOW + 40).count == 2
    # More than are left: all of them, and the key is gone.
    assert sw.refund(key, 100) == 2
    assert c.exists(key) == 0
    assert sw.refund(key, 1) == 0


def test_refund_after_allow_all_restores_every_key(path, key):
    sw = SlidingWindow(path[1].client())
    c = path[1].client()
    user, tenant = f"{key}:user", f"{key}:tenant"
    limits = {user: [Limit(1, 10), Limit(60, 100)], tenant: Limit(60, 1000)}
    sw.allow_all(limits, now=NOW)
    want = sw.peek_all(limits, now=NOW + 1)
    assert sw.allow_all(limits, cost=3, now=NOW + 1).allowed
    assert [sw.refund(k, 3, at=NOW + 1) for k in (user, tenant)] == [3, 3]
    assert sw.peek_all(limits, now=NOW + 1) == want


@pytest.mark.parametrize(
    "args, want",
    [
        ([], "wrong number of arguments for 'slidingwindow.refund' command"),
        ([0], "n must be an integer between 1 and 9007199254740992"),
        (["9007199254740993"], "n must be an integer between 1 and 9007199254740992"),
        (["1.5"], "n must be an integer between 1 and 9007199254740992"),
        ([1, "AT"], "syntax error, option 'AT' needs a value"),
        ([1, "at", "-1"], "AT must be an integer between 0 and 9007199254740992, or *"),
        ([1, "AT", "inf"], "AT must be an integer between 0 and 9007199254740992, or *"),
        ([1, "AT", 5, "at", 6], "syntax error, option 'at' given twice"),
        ([1, "COST", 1], "syntax error, unknown option 'COST'"),
    ],
)
def test_refund_errors_are_exact(path, key, args, want):
    sw = SlidingWindow(path[1].client())
    c = path[1].client()
    c.zadd(key, {"m": NOW})
    with pytest.raises(redis.ResponseError) as e:
        sw.call("refund", key, args)
    assert str(e.value) == want
    assert c.zcard(key) == 1
    c.set(key, "x")
    with pytest.raises(redis.ResponseError) as e:
        sw.refund(key)
    assert str(e.value).startswith("WRONGTYPE Operation against a key")


def test_top_lists_the_keys_refused_most(path, key):
    name, server = path
    c = server.client()
    sw = SlidingWindow(c)
    if name == "lua":
        with pytest.raises(SlidingWindowError, match="needs the module"):
            sw.top()
        return
    c.execute_command("SLIDINGWINDOW.TOPRESET")
    other = key + ":other"
    for k, refusals in ((key, 3), (other, 1)):
        assert sw.allow(k, Limit(60, 1), now=NOW).allowed
        assert [sw.allow(k, Limit(60, 1), now=NOW).allowed for _ in range(refusals)] == [False] * refusals
    assert sw.top() == [TopEntry(key.encode(), 3, 0), TopEntry(other.encode(), 1, 0)]
    assert sw.top(1) == [TopEntry(key.encode(), 3, 0)]
    with pytest.raises(ValueError):
        sw.top(0)
