"""ShouldRateLimit end to end: the service binary, a real Redis with the module, Envoy's protos."""

from __future__ import annotations

import time
from datetime import timedelta

import grpc
import pytest
from envoy_data_plane.envoy.service.ratelimit.v3 import (
    RateLimitResponseCode as Code,
    RateLimitResponseRateLimitUnit as Unit,
)

from conftest import descriptor, logged
from slidingwindow_testkit import Server, wait_for

OK, OVER = Code.OK, Code.OVER_LIMIT
U32_MAX = 2**32 - 1

CONFIG = """
domain: shop
descriptors:
  - {key: user, rate_limit: {unit: minute, requests_per_unit: 3, name: per-user}}
  - {key: route, rate_limit: {unit: hour, requests_per_unit: 10}}
  - {key: route, value: checkout, rate_limit: {unit: minute, requests_per_unit: 1}}
  - key: tenant
    value: acme
    descriptors:
      - {key: user, rate_limit: {unit: second, requests_per_unit: 2}}
  - {key: path, value: /api/*, rate_limit: {unit: day, requests_per_unit: 5}}
  - {key: bot, shadow_mode: true, rate_limit: {unit: minute, requests_per_unit: 1}}
  - {key: internal, rate_limit: {unlimited: true}}
  - {key: banned, rate_limit: {unit: second, requests_per_unit: 0}}
"""


def key(*entries: tuple[str, str]) -> str:
    return "ratelimit:{shop}:" + ":".join(f"{k}={v}" for k, v in entries)


def ms(d: timedelta | None) -> int | None:
    return None if d is None else round(d / timedelta(milliseconds=1))




def now_ms() -> int:
    return time.time_ns() // 1_000_000


@pytest.mark.each_server
def test_exact_admissions_then_over_limit_with_the_logs_wait(start, r):
    s = start(CONFIG)
    for remaining in (2, 1, 0):
        resp = s.ask("shop", [("user", "alice")])
        assert resp.overall_code == OK
        (st,) = resp.statuses
        assert (st.code, st.limit_remaining) == (OK, remaining)
        assert (st.current_limit.requests_per_unit, st.current_limit.unit) == (3, Unit.MINUTE)
        assert st.current_limit.name == "per-user"
    oldest = int(r.zrange(key(("user", "alice")), 0, 0, withscores=True)[0][1])
    before = now_ms()
    resp = s.ask("shop", [("user", "alice")])
    after = now_ms()
    assert resp.overall_code == OVER
    (st,) = resp.statuses
    assert (st.code, st.limit_remaining) == (OVER, 0)
    # The wait is the log's: the oldest request leaves the window at oldest + 60 s, so the
    # service's `now` (oldest + 60000 - wait) lies within the call.
    assert before <= oldest + 60_000 - ms(st.duration_until_reset) <= after
    assert r.zcard(key(("user", "alice"))) == 3
    # Another value of the same key has its own log.
    assert s.ask("shop", [("user", "bob")]).statuses[0].limit_remaining == 2


def test_ok_status_reports_the_time_until_the_window_is_empty(start, r):
    s = start(CONFIG)
    before = now_ms()
    st = s.ask("shop", [("route", "search")]).statuses[0]
    after = now_ms()
    assert (st.code, st.limit_remaining) == (OK, 9)
    (score,) = [int(sc) for _, sc in r.zrange(key(("route", "search")), 0, -1, withscores=True)]
    assert before <= score <= after
    assert ms(st.duration_until_reset) == 3_600_000  # newest + window - now, with newest = now


def test_most_specific_match_nested_and_wildcard(start, r):
    s = start(CONFIG)
    checkout = s.ask("shop", [("route", "checkout")]).statuses[0]
    assert (checkout.current_limit.requests_per_unit, checkout.limit_remaining) == (1, 0)
    assert s.ask("shop", [("route", "other")]).statuses[0].current_limit.requests_per_unit == 10
    nested = s.ask("shop", [("tenant", "acme"), ("user", "u1")]).statuses[0]
    assert (nested.current_limit.requests_per_unit, nested.current_limit.unit) == (2, Unit.SECOND)
    assert r.zcard(key(("tenant", "acme"), ("user", "u1"))) == 1
    wild = s.ask("shop", [("path", "/api/orders")]).statuses[0]
    assert (wild.current_limit.requests_per_unit, wild.current_limit.unit) == (5, Unit.DAY)
    # Depth must match: the first level of a nested entry alone has no limit.
    alone = s.ask("shop", [("tenant", "acme")])
    assert (alone.overall_code, alone.statuses[0].current_limit) == (OK, None)


@pytest.mark.each_server
def test_hits_addend_request_and_descriptor(start, r):
    s = start(CONFIG)
    k = key(("route", "search"))
    assert s.ask("shop", [("route", "search")], hits_addend=4).statuses[0].limit_remaining == 6
    assert r.zcard(k) == 4
    # The descriptor's own hits_addend overrides the request's.
    d = descriptor([("route", "search")], hits_addend=1)
    assert s.ask("shop", d, hits_addend=5).statuses[0].limit_remaining == 5
    assert r.zcard(k) == 5
    # 6 more do not fit in the 5 left: refused, nothing charged, nothing left for it (as the
    # reference says 0), and the wait until 6 fit: the oldest request leaves the window.
    oldest = int(r.zrange(k, 0, 0, withscores=True)[0][1])
    before = now_ms()
    resp = s.ask("shop", [("route", "search")], hits_addend=6)
    after = now_ms()
    assert (resp.overall_code, resp.statuses[0].limit_remaining) == (OVER, 0)
    assert before <= oldest + 3_600_000 - ms(resp.statuses[0].duration_until_reset) <= after
    assert r.zcard(k) == 5
    # More than the limit can ever hold: refused, remaining 0, and the wait until the window is
    # empty (the newest request's score plus the window).
    newest = int(r.zrange(k, -1, -1, withscores=True)[0][1])
    before = now_ms()
    resp = s.ask("shop", [("route", "search")], hits_addend=11)
    after = now_ms()
    (st,) = resp.statuses
    assert (resp.overall_code, st.code, st.limit_remaining) == (OVER, OVER, 0)
    assert before <= newest + 3_600_000 - ms(st.duration_until_reset) <= after


@pytest.mark.each_server
def test_atomic_descriptors_refused_one_charges_none(start, r):
    s = start(CONFIG)
    both = ([("route", "search")], [("route", "checkout")])
    first = s.ask("shop", *both)
    assert first.overall_code == OK
    assert [st.limit_remaining for st in first.statuses] == [9, 0]
    second = s.ask("shop", *both)
    assert second.overall_code == OVER
    assert [st.code for st in second.statuses] == [OK, OVER]
    assert [st.limit_remaining for st in second.statuses] == [9, 0]
    # Descriptor 1 had room but was not charged: its log still holds the first request only.
    assert logged(r, key(("route", "search")), 3600, 10) == 1
    assert r.zcard(key(("route", "search"))) == 1


@pytest.mark.each_server
def test_atomic_across_mixed_costs(start, r):
    """Descriptors with different hits_addend need two ALLOWALL calls; a refusal by the second
    takes back the first's charge."""
    s = start(CONFIG)
    resp = s.ask(
        "shop",
        descriptor([("route", "search")], hits_addend=2),
        descriptor([("route", "checkout")], hits_addend=3),
    )
    assert resp.overall_code == OVER
    assert [st.code for st in resp.statuses] == [OK, OVER]
    # The first one is back to its whole limit; the refused one has nothing left for 3.
    assert [st.limit_remaining for st in resp.statuses] == [10, 0]
    assert r.exists(key(("route", "search"))) == 0


@pytest.mark.each_server
def test_atomic_across_more_than_16_keys(start, r):
    """ALLOWALL takes 16 keys: 17 descriptors are two calls, still all or nothing."""
    s = start(CONFIG)
    users = [[("user", f"u{i}")] for i in range(17)]
    assert s.ask("shop", *users).overall_code == OK
    assert all(r.zcard(key(("user", f"u{i}"))) == 1 for i in range(17))
    s.ask("shop", [("user", "u16")], hits_addend=2)  # u16, the 17th, is now full
    resp = s.ask("shop", *users)
    assert resp.overall_code == OVER
    assert [st.code for st in resp.statuses] == [OK] * 16 + [OVER]
    # The first call's 16 charges were taken back.
    assert all(r.zcard(key(("user", f"u{i}"))) == 1 for i in range(16))
    assert [st.limit_remaining for st in resp.statuses] == [2] * 16 + [0]


def test_unknown_descriptor_is_ok_and_writes_nothing(start, r):
    s = start(CONFIG)
    for domain, entries in [("shop", [("nope", "x")]), ("other-domain", [("user", "a")])]:
        resp = s.ask(domain, entries)
        assert resp.overall_code == OK
        (st,) = resp.statuses
        assert (st.code, st.current_limit, st.limit_remaining, st.duration_until_reset) == (OK, None, 0, None)
    assert r.dbsize() == 0
    # An unknown descriptor next to a limited one changes nothing for it.
    resp = s.ask("shop", [("nope", "x")], [("user", "a")])
    assert [st.limit_remaining for st in resp.statuses] == [0, 2]
    assert r.keys("*") == [key(("user", "a")).encode()]


def test_unlimited_is_never_counted(start, r):
    s = start(CONFIG)
    for _ in range(3):
        resp = s.ask("shop", [("internal", "svc")])
        assert resp.overall_code == OK
        assert resp.statuses[0].limit_remaining == U32_MAX
    assert r.dbsize() == 0


@pytest.mark.each_server
def test_zero_limit_refuses_without_charging_others(start, r):
    s = start(CONFIG)
    resp = s.ask("shop", [("user", "a")], [("banned", "1.2.3.4")])
    assert resp.overall_code == OVER
    assert [st.code for st in resp.statuses] == [OK, OVER]
    assert r.dbsize() == 0


def test_shadow_mode_counts_reports_never_refuses(start, r):
    s = start(CONFIG)
    codes, shadow_remaining = [], []
    for _ in range(3):
        resp = s.ask("shop", [("bot", "crawler")], [("route", "search")])
        codes.append(resp.overall_code)
        shadow_remaining.append(resp.statuses[0].limit_remaining)
        assert [st.code for st in resp.statuses] == [OK, OK]
    assert codes == [OK, OK, OK]
    assert shadow_remaining == [0, 0, 0]
    # Counted up to its limit (a sliding log keeps no refused request)...
    assert r.zcard(key(("bot", "crawler"))) == 1
    # ...and never blocked the other descriptor's charge.
    assert r.zcard(key(("route", "search"))) == 3
    # Its status still tells when it would admit again.
    oldest = int(r.zrange(key(("bot", "crawler")), 0, 0, withscores=True)[0][1])
    before = now_ms()
    st = s.ask("shop", [("bot", "crawler")]).statuses[0]
    after = now_ms()
    assert before <= oldest + 60_000 - ms(st.duration_until_reset) <= after


@pytest.mark.each_server
def test_negative_hits_give_back_with_refund(start, r):
    s = start(CONFIG)
    k = key(("route", "search"))
    s.ask("shop", [("route", "search")], hits_addend=5)
    assert r.zcard(k) == 5
    back = descriptor([("route", "search")], hits_addend=3, is_negative_hits=True)
    resp = s.ask("shop", back)
    assert (resp.overall_code, resp.statuses[0].code, resp.statuses[0].limit_remaining) == (OK, OK, 8)
    assert r.zcard(k) == 2
    # Giving back more than was logged empties the log; nothing goes negative.
    s.ask("shop", descriptor([("route", "search")], hits_addend=9, is_negative_hits=True))
    assert r.exists(k) == 0


def test_response_headers(start, r):
    s = start(CONFIG, "--response-headers")
    resp = s.ask("shop", [("user", "a")], [("route", "checkout")])
    headers = {h.key: h.value for h in resp.response_headers_to_add}
    assert headers == {
        "RateLimit-Policy": '"per-user";q=3;w=60,"d1";q=1;w=60',
        "RateLimit": '"d1";r=0;t=60',
    }
    resp = s.ask("shop", [("user", "a")], [("route", "checkout")])
    headers = {h.key: h.value for h in resp.response_headers_to_add}
    assert headers["RateLimit"].startswith('"d1";r=0;t=')
    assert 1 <= int(headers["Retry-After"]) <= 60
    # Without the flag: none.
    plain = start(CONFIG)
    assert plain.ask("shop", [("user", "b")]).response_headers_to_add == []


def test_empty_domain_or_descriptors_answer_as_the_reference(start):
    """The reference's service errors reach gRPC as UNKNOWN, with these messages."""
    s = start(CONFIG)
    cases = [
        ("", [[("user", "a")]], "rate limit domain must not be empty"),
        ("shop", [], "rate limit descriptor list must not be empty"),
    ]
    for domain, descs, message in cases:
        with pytest.raises(grpc.RpcError) as e:
            s.ask(domain, *descs)
        assert (e.value.code(), e.value.details()) == (grpc.StatusCode.UNKNOWN, message)


@pytest.mark.parametrize("mode", ["open", "closed"])
def test_on_redis_error_across_a_restart(start, mode):
    own = Server()
    try:
        s = start(CONFIG, "--on-redis-error", mode, redis_url=own.url)
        assert s.ask("shop", [("route", "checkout")]).overall_code == OK
        own.stop()
        down = s.ask("shop", [("route", "checkout")], [("bot", "b")], [("nope", "x")])
        if mode == "open":
            assert down.overall_code == OK
            assert [st.code for st in down.statuses] == [OK, OK, OK]
        else:
            assert down.overall_code == OVER
            # Only the enforced limit refuses: shadow and unknown descriptors stay OK.
            assert [st.code for st in down.statuses] == [OVER, OK, OK]
        # A request that needs no Redis is answered as usual.
        assert s.ask("shop", [("internal", "x")]).overall_code == OK
        assert own.start()
        # The restarted Redis is empty: the first request after it is back is admitted (and
        # charged), the second refused. No request fails once Redis answers PING again.
        first = s.ask("shop", [("route", "checkout")])
        assert (first.overall_code, first.statuses[0].limit_remaining) == (OK, 0)
        assert s.ask("shop", [("route", "checkout")]).overall_code == OVER
        assert own.client().zcard(key(("route", "checkout"))) == 1
        err = s.close()
        assert "redis failed" in err and "redis answers again" in err
    finally:
        own.close()


def test_cluster_mode_one_node(start):
    """--cluster: a one-node Redis Cluster holding every slot; a request's keys share the
    domain's hash tag, so its one MULTI/EXEC goes to the node owning that slot."""
    node = Server(extra=["--cluster-enabled", "yes", "--cluster-config-file", "nodes.conf"])
    try:
        c = node.client()
        c.execute_command("CLUSTER", "ADDSLOTSRANGE", 0, 16383)
        wait_for("cluster_state:ok", lambda: b"cluster_state:ok" in c.execute_command("CLUSTER", "INFO"))
        s = start(CONFIG, "--cluster", redis_url=node.url)
        both = ([("route", "search")], [("route", "checkout")])
        assert s.ask("shop", *both).overall_code == OK
        resp = s.ask("shop", *both)
        assert [st.code for st in resp.statuses] == [OK, OVER]
        assert c.zcard(key(("route", "search"))) == 1
    finally:
        node.close()


def test_compact_storage(start):
    """The same calls on the module's compact storage (keys are not sorted sets there)."""
    own = Server(extra=["--slidingwindow.storage", "compact"])
    try:
        c = own.client()
        s = start(CONFIG, redis_url=own.url)
        both = ([("route", "search")], [("route", "checkout")])
        assert s.ask("shop", *both).overall_code == OK
        resp = s.ask("shop", *both)
        assert [st.code for st in resp.statuses] == [OK, OVER]
        assert c.type(key(("route", "search"))) != b"zset"
        assert logged(c, key(("route", "search")), 3600, 10) == 1
        s.ask("shop", [("route", "search")], hits_addend=4)
        s.ask("shop", descriptor([("route", "search")], hits_addend=2, is_negative_hits=True))
        assert logged(c, key(("route", "search")), 3600, 10) == 3
        assert s.ask("shop", [("bot", "b")], [("bot", "b2")]).overall_code == OK
    finally:
        own.close()


def calls(r) -> dict[str, int]:
    """Commands run so far, by name (INFO commandstats)."""
    return {k.removeprefix("cmdstat_"): v["calls"] for k, v in r.info("commandstats").items()}


def test_one_allowall_per_request(module_only, start, r):
    """Two counted descriptors, admitted or refused: one SLIDINGWINDOW.ALLOWALL ... DETAIL, no
    MULTI, no PEEK."""
    s = start(CONFIG)
    r.config_resetstat()
    for _ in range(3):
        s.ask("shop", [("user", "u")], [("route", "checkout")])
    got = calls(r)
    assert got.get("slidingwindow.allowall") == 3
    assert "multi" not in got and "slidingwindow.peek" not in got and "exec" not in got


@pytest.mark.each_server
def test_check_only_descriptor_on_a_full_limit_is_over(start, r):
    s = start(CONFIG)
    look = descriptor([("route", "checkout")], hits_addend=0)
    (st,) = s.ask("shop", look).statuses
    assert (st.code, st.limit_remaining) == (OK, 1)
    assert r.exists(key(("route", "checkout"))) == 0
    assert s.ask("shop", [("route", "checkout")]).overall_code == OK
    oldest = int(r.zrange(key(("route", "checkout")), 0, 0, withscores=True)[0][1])
    before = now_ms()
    resp = s.ask("shop", look, [("user", "carol")])
    after = now_ms()
    # Over: one more request would be refused; and, all or nothing, the other is not charged.
    assert resp.overall_code == OVER
    assert [st.code for st in resp.statuses] == [OVER, OK]
    assert resp.statuses[0].limit_remaining == 0
    assert before <= oldest + 60_000 - ms(resp.statuses[0].duration_until_reset) <= after
    assert r.exists(key(("user", "carol"))) == 0
    assert r.zcard(key(("route", "checkout"))) == 1


@pytest.mark.each_server
def test_the_same_descriptor_twice_counts_twice(start, r):
    s = start(CONFIG)
    resp = s.ask("shop", [("user", "dave")], [("user", "dave")])
    assert (resp.overall_code, [st.limit_remaining for st in resp.statuses]) == (OK, [2, 1])
    assert r.zcard(key(("user", "dave"))) == 2
    # One slot left, two asked: refused, and the first occurrence's charge is taken back.
    resp = s.ask("shop", [("user", "dave")], [("user", "dave")])
    assert resp.overall_code == OVER
    assert [st.code for st in resp.statuses] == [OK, OVER]
    assert r.zcard(key(("user", "dave"))) == 2


def test_overrides_in_every_unit_and_an_unknown_one(start, r):
    from envoy_data_plane.envoy.extensions.common.ratelimit.v3 import RateLimitDescriptorRateLimitOverride as Override

    s = start(CONFIG)
    for unit, seconds in [(Unit.WEEK, 604_800), (Unit.MONTH, 2_592_000), (Unit.YEAR, 31_536_000)]:
        d = descriptor([("route", f"o{unit}")], limit=Override(requests_per_unit=1, unit=unit))
        first = s.ask("shop", d)
        assert (first.overall_code, first.statuses[0].current_limit.unit) == (OK, unit)
        assert s.ask("shop", d).overall_code == OVER
        assert seconds * 1000 - 60_000 < r.pttl(key(("route", f"o{unit}"))) <= seconds * 1000
    bad = descriptor([("route", "x")], limit=Override(requests_per_unit=1, unit=Unit.UNKNOWN))
    with pytest.raises(grpc.RpcError) as e:
        s.ask("shop", bad)
    assert e.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert "descriptors[0].limit.unit" in e.value.details()


def test_key_prefix(start, r):
    s = start(CONFIG, "--key-prefix", "edge1:")
    assert s.ask("shop", [("user", "p")]).overall_code == OK
    assert r.keys("*") == [b"edge1:" + key(("user", "p")).encode()]
