"""The helper over redis-py's RedisCluster, on both paths: three masters, keys with hash tags.
Each call goes to the node of its key's slot; ALLOWALL's keys must share a slot."""

from __future__ import annotations

import pytest
import redis

from slidingwindow import AllResult, Limit, SlidingWindow

NOW = 1_700_000_000_000


def moved(cluster) -> int:
    """MOVED replies the nodes have sent since their stats were reset."""
    return sum(n.client().info("errorstats").get("errorstat_MOVED", {}).get("count", 0) for n in cluster.nodes)


def lookups(cluster) -> int:
    """COMMAND GETKEYS calls (redis-py asking where a command's keys are) since the reset."""
    return sum(n.client().info("commandstats").get("cmdstat_command|getkeys", {}).get("calls", 0) for n in cluster.nodes)


def test_every_command_reaches_its_slot(cluster):
    name, cl = cluster
    c = cl.client()
    sw = SlidingWindow(c)
    assert sw.uses_module == (name == "module")
    for n in cl.nodes:
        n.client().config_resetstat()
    keys = [f"rl:{{user:{i}}}" for i in range(12)]
    for key in keys:
        assert [sw.allow(key, Limit(60, 2), now=NOW + i).allowed for i in range(3)] == [True, True, False]
        assert sw.refund(key, 1, at=NOW + 1) == 1
        assert sw.peek(key, Limit(60, 2), now=NOW + 2).allowed
        tag = key[3:]
        assert sw.allow_all({f"{tag}:a": Limit(60, 2), tag: Limit(60, 5)}, now=NOW).allowed
    # One round trip a call: no redirect, and no question about where the keys are.
    assert moved(cl) == 0 and lookups(cl) == 0
    assert sum(1 for n in cl.nodes if n.client().dbsize() > 0) > 1


def test_allow_all_with_one_hash_tag(cluster):
    sw = SlidingWindow(cluster[1].client())
    user, tenant = "{tenant7}:user:42", "{tenant7}"
    limits = {user: [Limit(1, 10), Limit(60, 2)], tenant: Limit(60, 3)}
    assert sw.allow_all(limits, now=NOW).allowed and sw.allow_all(limits, now=NOW + 1).allowed
    assert sw.allow_all(limits, now=NOW + 2) == AllResult(False, 2, 0, 59_998, 59_999, 1, user, Limit(60, 2))
    assert sw.refund(tenant, 1, at=NOW + 1) == 1
    assert sw.peek_all({tenant: Limit(60, 3)}, now=NOW + 2).remaining == 1


def test_allow_all_across_slots_is_refused(cluster):
    sw = SlidingWindow(cluster[1].client())
    # The module path: the server answers CROSSSLOT; the script path: redis-py refuses first.
    with pytest.raises((redis.ResponseError, redis.exceptions.RedisClusterException), match="CROSSSLOT|same"):
        sw.allow_all({"{a}:user": Limit(60, 3), "{b}": Limit(60, 3)}, now=NOW)
    assert cluster[1].client().exists("{a}:user", "{b}") == 0


def test_top_asks_every_master(cluster):
    name, cl = cluster
    sw = SlidingWindow(cl.client())
    if name == "lua":
        return
    for n in cl.nodes:
        n.client().execute_command("SLIDINGWINDOW.TOPRESET")
    keys = [f"top:{{user:{i}}}" for i in range(12)]
    for i, key in enumerate(keys):
        assert sw.allow(key, Limit(60, 1), now=NOW).allowed
        for _ in range(i + 1):
            assert not sw.allow(key, Limit(60, 1), now=NOW).allowed
    # The keys live on more than one master; TOP of each lists its own.
    assert sum(1 for n in cl.nodes if n.client().execute_command("SLIDINGWINDOW.TOP")) > 1
    assert [(e.key.decode(), e.refused, e.error) for e in sw.top(12)] == [
        (keys[i], i + 1, 0) for i in reversed(range(12))
    ]
