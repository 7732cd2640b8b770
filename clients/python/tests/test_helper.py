"""The helper on both paths: a server with the module, and one without it (the Lua script)."""

from __future__ import annotations

import pytest
import redis

from slidingwindow import CROCKFORD, Limit, Result, SlidingWindow

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
    sw = SlidingWindow(path[1].client())
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
