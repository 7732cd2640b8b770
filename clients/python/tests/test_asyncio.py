"""The asyncio helper (slidingwindow.asyncio over redis.asyncio), on both paths: the shared spec
(spec/cases.json through its raw calls, spec/leases.json on its lease), the same results as the
thread helper for the same calls, a bad day, a cancelled call, a three-master cluster, and many
tasks on one key."""

from __future__ import annotations

import asyncio
import dataclasses
import random
import time

import pytest
import redis

from slidingwindow import AllResult, Limit, Result, SlidingWindow, TopEntry, UnavailableError
from slidingwindow import asyncio as aio
from slidingwindow_testkit import Sentinels, Server

import test_spec
import test_spec_leases
from test_asgi import app_with, client_of
from test_cluster import lookups, moved
from test_concurrency import Log, slidingwindow_calls
from test_options import busiest

NOW = 1_700_000_000_000
# Seconds a call may wait where the test is not about timeouts: the harness's clients' own, so
# that a loaded machine is no timing threshold.
PATIENT = 30


def test_every_spec_case(path, key, settle):
    _, server = path
    sw = aio.SlidingWindow(server.async_client(), timeout=PATIENT)
    test_spec.replay(sw, key, settle)
    settle(sw.close())


@pytest.mark.parametrize("scenario", test_spec_leases.SPEC["scenarios"],
                         ids=[s["name"] for s in test_spec_leases.SPEC["scenarios"]])
def test_lease_scenario(path, key, scenario, settle):
    name, server = path
    sw = aio.SlidingWindow(server.async_client(), use=name)
    test_spec_leases.replay(server.client(), sw, key, scenario, name == "module", settle)


def calls(sw, key: str):
    """The same calls on either helper, each a zero-argument callable (``allow_all``'s keys share
    ``key``'s tag)."""
    other = key[:-1] + ":tenant}"
    limits = [Limit(1, 3), Limit(60, 5)]
    return [
        lambda: sw.allow(key, limits, now=NOW),
        lambda: sw.allow(key, limits, cost=2, now=NOW + 1, detail=True),
        lambda: sw.allow(key, limits, now=NOW + 2, lease=500, precision=10, detail=True),
        lambda: sw.peek(key, limits, now=NOW + 3, detail=True),
        lambda: sw.allow(key, limits, now=NOW + 4),
        lambda: sw.refund(key, 1, at=NOW + 1),
        lambda: sw.allow_all({key: limits, other: Limit(60, 2)}, now=NOW + 5, detail=True),
        lambda: sw.peek_all([(other, Limit(60, 2)), (key, Limit(1, 1))], cost=2, now=NOW + 6),
        lambda: sw.refund(key, 5),
        lambda: sw.allow(key, Limit(1, 1), cost=2, now=NOW + 7),
    ]


def test_the_same_results_as_the_thread_helper(path, key, settle):
    name, server = path
    sw = SlidingWindow(server.client())
    asw = aio.SlidingWindow(server.async_client())
    twin = key[:-1] + "-async}"
    want = [call() for call in calls(sw, key)]
    got = [settle(call()) for call in calls(asw, twin)]
    assert [renamed(r, twin, key) for r in got] == want
    assert any(isinstance(r, AllResult) for r in got) and any(isinstance(r, Result) and not r.allowed for r in got)
    assert settle(asw.uses_module) == (name == "module")
    if name == "module":
        server.client().execute_command("SLIDINGWINDOW.TOPRESET")
        assert [settle(asw.allow(key, Limit(60, 1), now=NOW + 8)).allowed for _ in range(2)] == [True, False]
        assert settle(asw.top(1)) == [TopEntry(key.encode(), 1, 0)] == sw.top(1)
    settle(asw.close())


def renamed(r, old: str, new: str):
    """An ``AllResult`` naming ``old``'s tag as ``new``'s; anything else as it is."""
    if isinstance(r, AllResult):
        return dataclasses.replace(r, binding_key=r.binding_key.replace(old[:-1], new[:-1]))
    return r


def test_a_lease_hands_out_exactly_max(path, key, settle):
    asw = aio.SlidingWindow(path[1].async_client())

    async def run():
        async with asw.lease(key, Limit(60, 10), size=4, duration_ms=60_000) as lease:
            got = [await lease.allow() for _ in range(12)]
            held = lease.permits
        return got, held

    got, held = settle(run())
    assert [r.allowed for r in got] == [True] * 10 + [False] * 2
    assert held == 0 and got[-1].retry_after_ms > 0
    # Leaving the block gave nothing back (all handed out): the key holds 10.
    assert path[1].client().zcard(key) == 10


def test_a_lease_gives_unused_permits_back_at_its_end(path, key, settle):
    c = path[1].client()
    asw = aio.SlidingWindow(path[1].async_client())

    async def run():
        lease = asw.lease(key, Limit(60, 10), size=5, duration_ms=50)
        assert (await lease.allow()).allowed
        assert c.zcard(key) == 5
        # The loop's timer refunds the 4 unused permits when the lease ends.
        while c.zcard(key) != 1:
            await asyncio.sleep(0.005)
        assert lease.permits == 0
        return await lease.close()

    assert settle(run()) == 0


def test_redis_down_closed_raises_open_lets_through(key, settle):
    s = Server(with_module=True)
    try:
        closed = aio.SlidingWindow(s.async_client())
        opened = aio.SlidingWindow(s.async_client(), on_error="open")
        assert settle(closed.allow(key, Limit(60, 1))).allowed
        s.stop()
        with pytest.raises(UnavailableError) as e:
            settle(closed.allow(key, Limit(60, 1)))
        assert isinstance(e.value.__cause__, (redis.ConnectionError, OSError))
        r = settle(opened.allow(key, Limit(60, 1)))
        assert r.allowed and isinstance(r.error, UnavailableError)
        assert settle(opened.allow_all({key: Limit(60, 1)})).error is not None
        with pytest.raises(UnavailableError):
            settle(opened.refund(key))
    finally:
        s.close()


def test_a_paused_server_times_out_and_a_cancelled_call_leaves_no_reply_behind(path, key, settle):
    c = path[1].client()
    asw = aio.SlidingWindow(path[1].async_client(), timeout=0.2)
    patient = aio.SlidingWindow(path[1].async_client(), timeout=None)
    assert settle(asw.allow(key, Limit(60, 5))).allowed
    assert settle(patient.allow(key, Limit(60, 5))).allowed
    c.client_pause(30_000, all=False)

    async def cancelled():
        task = asyncio.ensure_future(patient.allow(key, Limit(60, 5)))
        # Sent, and waiting on its reply: the server has a client blocked by the pause.
        while c.info("clients")["blocked_clients"] == 0:
            await asyncio.sleep(0.005)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task

    try:
        with pytest.raises(UnavailableError) as e:
            settle(asw.allow(key, Limit(60, 5)))
        assert isinstance(e.value.__cause__, redis.TimeoutError)
        settle(cancelled())
    finally:
        c.client_unpause()
    # Each helper's next call gets its own answer, not one left over from before.
    for sw in (asw, patient):
        r = settle(sw.allow(key, Limit(60, 5), detail=True))
        assert r.now is not None and r.count in (3, 4, 5)
    assert c.zcard(key) <= 5


def test_confirm_with_and_without_a_replica(path, key, settle):
    """``confirm``: WAIT on the call's connection; without a replica the charge goes back at the
    score it was logged with, with one the replica holds the admitted calls."""
    server = Server(with_module=path[0] == "module")
    replica = None
    try:
        c = server.client()
        deny = aio.SlidingWindow(server.async_client(), confirm=(1, 20))
        r = settle(deny.allow(key, Limit(60, 5), lease=250, precision=100_000, detail=True))
        assert (r.allowed, r.confirmed, r.count) == (False, False, 1) and c.exists(key) == 0
        keyed = {f"{key}:a": Limit(60, 5), f"{key}:b": Limit(60, 5)}
        assert settle(deny.allow_all(keyed, cost=2)).confirmed is False
        assert c.exists(f"{key}:a", f"{key}:b") == 0
        replica = Server(with_module=server.with_module, extra=["--replicaof", "127.0.0.1", str(server.port)])
        rc = replica.linked()
        sw = aio.SlidingWindow(server.async_client(), confirm=(1, 5_000))
        got = [settle(sw.allow(key, Limit(60, 3))) for _ in range(4)]
        assert [(r.allowed, r.confirmed) for r in got] == [(True, True)] * 3 + [(False, None)]
        assert rc.zcard(key) == 3
    finally:
        if replica is not None:
            replica.close()
        server.close()


def test_a_sentinels_master(key, settle):
    """``redis.asyncio.sentinel.Sentinel(...).master_for(name)``: the helper's own connections
    find the master through the sentinels, as the client's would."""
    from redis.asyncio.sentinel import Sentinel

    master = Server(with_module=True)
    sentinels = None
    try:
        sentinels = Sentinels("swa", master.port)
        client = Sentinel([("127.0.0.1", p) for p in sentinels.ports]).master_for("swa")
        asw = aio.SlidingWindow(client)
        assert [settle(asw.allow(key, Limit(60, 2))).allowed for _ in range(3)] == [True, True, False]
        assert master.client().zcard(key) == 2
        settle(asw.close())
    finally:
        if sentinels is not None:
            sentinels.close()
        master.close()


def test_cluster(cluster, settle):
    """Every call goes to its key's node, without a redirection or a question about its keys;
    ALLOWALL's keys share a tag, keys of two slots are refused; TOP asks every master."""
    name, cl = cluster
    client = cl.async_client()
    asw = aio.SlidingWindow(client)
    assert settle(asw.uses_module) == (name == "module")
    for n in cl.nodes:
        n.client().config_resetstat()
        n.client().flushall()
    keys = [f"rl:{{auser:{i}}}" for i in range(12)]

    async def run():
        for key in keys:
            assert [(await asw.allow(key, Limit(60, 2), now=NOW + i)).allowed for i in range(3)] == [True, True, False]
            assert await asw.refund(key, 1, at=NOW + 1) == 1
            assert (await asw.peek(key, Limit(60, 2), now=NOW + 2)).allowed
            tag = key[3:]
            assert (await asw.allow_all({f"{tag}:a": Limit(60, 2), tag: Limit(60, 5)}, now=NOW)).allowed
        async with asw.lease(keys[0], Limit(60, 10), size=3, duration_ms=60_000) as lease:
            assert [(await lease.allow()).allowed for _ in range(3)] == [True] * 3

    settle(run())
    assert moved(cl) == 0 and lookups(cl) == 0
    assert sum(1 for n in cl.nodes if n.client().dbsize() > 0) > 1

    # The README's FastAPI app on the cluster: each client address its own key, wherever its slot.
    app = app_with(asw, limits=[Limit(60, 3)])
    addresses = [f"127.0.0.{i}" for i in range(10, 16)]

    async def requests(address: str):
        async with client_of(app, address) as http:
            return [(await http.get("/")).status_code for _ in range(4)]

    assert [settle(requests(a)) for a in addresses] == [[200, 200, 200, 429]] * len(addresses)
    sync = cl.client()
    assert len({sync.get_node_from_key(f"rl:{{{a}}}").name for a in addresses}) > 1
    with pytest.raises((redis.ResponseError, redis.exceptions.RedisClusterException), match="CROSSSLOT|same"):
        settle(asw.allow_all({"{a}:user": Limit(60, 3), "{b}": Limit(60, 3)}, now=NOW))
    if name == "module":
        for n in cl.nodes:
            n.client().execute_command("SLIDINGWINDOW.TOPRESET")
        for i, key in enumerate(keys):
            for _ in range(i + 1):
                assert not settle(asw.allow(key, Limit(60, 1), now=NOW)).allowed
        assert [(e.key.decode(), e.refused) for e in settle(asw.top(12))] == [
            (keys[i], i + 1) for i in reversed(range(12))]
    settle(asw.close())
    settle(client.aclose())


TASKS = 32
RUN_S = 2.0


def test_tasks_on_one_key_never_exceed(path, key, settle):
    """32 tasks at 10 per second on the server's clock: every window of the logged scores holds
    at most 10, the busiest exactly 10."""
    _, server = path
    asw = aio.SlidingWindow(server.async_client(), timeout=PATIENT)
    log = Log(server.client(), key)
    admitted = []

    async def caller(seed: int):
        rng = random.Random(seed)
        while time.monotonic() < stop:
            admitted.append((await asw.allow(key, Limit(1, 10))).allowed)
            await asyncio.sleep(rng.random() * 0.002)

    stop = time.monotonic() + RUN_S

    async def run():
        await asyncio.gather(*(caller(i) for i in range(TASKS)))

    settle(run())
    scores = log.scores()
    assert len(scores) == sum(admitted), "the snapshots missed a logged request"
    assert busiest(scores, 1_000) == 10
    assert sum(admitted) >= 10 * RUN_S and len(admitted) > sum(admitted)
    settle(asw.close())


def test_a_lease_shared_by_tasks_under_overload(path, key, settle):
    """Limit 100 per second, leases of 10 per 100 ms, 8 tasks offering 10x the limit for 3 s: at
    most one Redis call per 20 requests, no 1 s window of the logged scores above the limit, the
    logged permits exactly those handed out."""
    _, server = path
    c = server.client()
    asw = aio.SlidingWindow(server.async_client(), timeout=PATIENT)
    lease = asw.lease(key, Limit(1, 100), size=10, duration_ms=100)
    log = Log(server.client(), key)
    every_s, run_s, tasks = 8 / 1000, 3.0, 8
    c.config_resetstat()

    async def caller(start: float):
        got = []
        for i in range(int(run_s / every_s)):
            await asyncio.sleep(max(0.0, start + i * every_s - time.monotonic()))
            got.append(await lease.allow())
        return got

    async def run():
        start = time.monotonic()
        results = [r for got in await asyncio.gather(*(caller(start) for _ in range(tasks))) for r in got]
        await lease.close()
        return results

    results = settle(run())
    spent = slidingwindow_calls(c)
    scores = log.scores()
    admitted = sum(r.allowed for r in results)
    assert len(results) == tasks * int(run_s / every_s)
    assert spent * 20 <= len(results), f"{spent} calls for {len(results)} requests"
    assert busiest(scores, 1_000) <= 100
    assert len(scores) == admitted
    settle(asw.close())


def test_slots_and_reservations(path, key, settle):
    """acquire / release and reserve / settle / cancel, their calls awaited: n + 1 tasks holding
    see exactly one refusal, every slot given back; a reservation refunds what was not used and
    charges what was used beyond it."""
    _, server = path
    c = server.client()
    asw = aio.SlidingWindow(server.async_client())
    n = 4

    async def holders():
        slots = await asyncio.gather(*(asw.acquire(key, n, 60) for _ in range(n + 1)))
        assert sorted(s.allowed for s in slots) == [False] + [True] * n
        assert c.zcard(key) == n
        for slot in slots:
            async with slot:
                pass
        assert c.zcard(key) == 0
        assert not await slots[0].release()

    settle(holders())
    tokens = key[:-1] + ":tokens}"

    async def reservations():
        r = await asw.reserve(tokens, Limit(60, 10), 6)
        assert r.allowed and c.zcard(tokens) == 6
        assert await r.settle(2) == aio.Settlement(4, 0, 0)
        r = await asw.reserve(tokens, Limit(60, 10), 3)
        assert await r.settle(9) == aio.Settlement(0, 0, 6)
        assert await (await asw.reserve(tokens, Limit(60, 10), 1)).cancel() == 1
        r = await asw.reserve(tokens, Limit(60, 20), 2)
        assert await r.cancel() == 2

    settle(reservations())
    assert c.zcard(tokens) == 5
    settle(asw.close())
