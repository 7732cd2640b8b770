"""Our extension `lease: {size, duration_ms}`: a busy descriptor's permits taken in bulk and
handed out from memory, never more than the limit in any window; unused permits given back at a
lease's end, on shutdown and when a reload drops the lease; quiet and non-leased descriptors keep
one exact call per request."""

from __future__ import annotations

import bisect
import math
import threading
import time

import grpc
import pytest
from envoy_data_plane.envoy.service.ratelimit.v3 import (
    RateLimitRequest,
    RateLimitResponseCode as Code,
    RateLimitServiceSyncStub,
)

from conftest import Service, descriptor, logged, write_config
from slidingwindow_testkit import wait_for

OK, OVER = Code.OK, Code.OVER_LIMIT


def key(*entries: tuple[str, str]) -> str:
    return "ratelimit:{d}:" + ":".join(f"{k}={v}" for k, v in entries)




def calls(r) -> dict[str, int]:
    """Commands run so far, by name (INFO commandstats)."""
    return {k.removeprefix("cmdstat_"): v["calls"] for k, v in r.info("commandstats").items()}


def module_calls(r) -> int:
    return sum(n for name, n in calls(r).items() if name.startswith("slidingwindow."))


def most_in_a_window(spans: list[tuple[int, int]], window_ms: int) -> int:
    """The most admissions any window of `window_ms` is sure to hold: each admission happened at
    some ms within its (sent, answered) span on the service's clock (the system clock here), so a
    window holds at least those whose whole span lies inside it. A window may start anywhere;
    the fullest one starts at some admission's sent time."""
    spans = sorted(spans)
    starts = [s for s, _ in spans]
    most = 0
    for i, (a, _) in enumerate(spans):
        # Spans that start at a or later and end before a + window.
        inside = sum(1 for s, e in spans[i:bisect.bisect_left(starts, a + window_ms)] if e < a + window_ms)
        most = max(most, inside)
    return most


def load(s: Service, seconds: float, threads: int, descriptors_of, most: int = 100_000) -> tuple[list, list]:
    """`threads` clients asking as fast as they can for `seconds` (each at most `most` times):
    each request's descriptors from descriptors_of(thread, i). Answers [(sent_ms, answered_ms, descriptors, response)] and
    any failure."""
    answers, failures = [], []
    lock = threading.Lock()
    stop = time.monotonic() + seconds

    def run(t: int) -> None:
        mine = []
        with grpc.insecure_channel(s.addr) as ch:
            stub = RateLimitServiceSyncStub(ch)
            i = 0
            while time.monotonic() < stop and i < most:
                descs = descriptors_of(t, i)
                i += 1
                sent = math.floor(time.time() * 1000)
                try:
                    resp = stub.should_rate_limit(
                        RateLimitRequest(domain="d", descriptors=[descriptor(d) for d in descs])
                    )
                except Exception as e:  # noqa: BLE001 (any failure fails the test)
                    with lock:
                        failures.append(e)
                    return
                mine.append((sent, math.ceil(time.time() * 1000), descs, resp))
        with lock:
            answers.extend(mine)

    workers = [threading.Thread(target=run, args=(t,)) for t in range(threads)]
    for w in workers:
        w.start()
    for w in workers:
        w.join()
    return answers, failures


def leased(unit: str, max_: int, size: int, duration_ms: int, user_max: int) -> str:
    """Domain `d`: `hot` at `max_` a `unit` in leases of `size` for `duration_ms`, `user` exact at
    `user_max` a `unit`."""
    return f"""
domain: d
descriptors:
  - key: hot
    rate_limit: {{unit: {unit}, requests_per_unit: {max_}, lease: {{size: {size}, duration_ms: {duration_ms}}}}}
  - key: user
    rate_limit: {{unit: {unit}, requests_per_unit: {user_max}}}
"""


BUSY = leased("minute", 1000000, 50, 1000, 100000)


def test_a_busy_leased_descriptor_costs_fewer_calls_than_requests(module_only, start, r):
    """Far from its max, every request admitted: the leased descriptor's requests make fewer
    Redis calls than requests; a request with a non-leased descriptor too still makes one
    ALLOWALL for it (the leased one's permit from memory at the same now)."""
    s = start(BUSY)
    r.config_resetstat()
    answers, failures = load(s, 1.5, 4, lambda t, i: [[("hot", "x")]])
    assert failures == []
    assert answers and all(resp.overall_code == OK for *_, resp in answers)
    n = len(answers)
    used = module_calls(r)
    assert 0 < used < n, (used, n)
    # Every admission is in the log (leased permits from their lease call on), and at most the
    # unused permits of the live lease and the next one more.
    assert n <= logged(r, key(("hot", "x")), 60, 1000000) <= n + 100
    # Leased and not: one ALLOWALL per request for the non-leased descriptor, no other call but
    # the leases' own.
    r.config_resetstat()
    answers, failures = load(s, 1.0, 4, lambda t, i: [[("hot", "x")], [("user", f"u{t}")]])
    assert failures == []
    assert all(resp.overall_code == OK for *_, resp in answers)
    got = calls(r)
    assert got.get("slidingwindow.allowall") == len(answers), got
    assert "multi" not in got and "exec" not in got and "slidingwindow.peek" not in got, got
    for *_, resp in answers:
        hot, user = resp.statuses
        assert hot.code == OK and 0 < hot.limit_remaining < 1000000
        assert user.code == OK


def test_lease_statistics_are_in_metrics(module_only, start, r):
    """/metrics has each lease spec's counters: its lease calls are the module's ALLOW calls,
    every one granted far from the max, and the permits from memory are the admissions that made
    no ALLOWALL, all of them in the log."""
    s = start(BUSY, "--metrics-listen", "127.0.0.1:0")
    r.config_resetstat()
    answers, failures = load(s, 1.0, 4, lambda t, i: [[("hot", "x")]])
    assert failures == []
    assert answers and all(resp.overall_code == OK for *_, resp in answers)
    spec = '{size="50",duration_ms="1000"}'

    def settled():
        # A lease call sent by the last requests may still be in flight.
        m, got = s.metrics(), calls(r)
        stat = lambda name: m[f"ratelimit_service_lease_{name}{spec}"]  # noqa: E731
        done = stat("calls") == stat("granted") == got.get("slidingwindow.allow", 0)
        return done and (stat, got)

    stat, got = wait_for("every lease call answered", settled)
    assert stat("calls") > 0
    assert stat("refused") == stat("errors") == 0
    assert stat("keys") == 1
    exact = got.get("slidingwindow.allowall", 0)
    logged_now = logged(r, key(("hot", "x")), 60, 1000000)
    assert len(answers) - exact <= stat("permits_from_memory") <= logged_now


TIGHT = leased("second", 100, 10, 100, 30)


@pytest.mark.each_server
def test_a_leased_descriptor_under_load_never_admits_more_than_its_limit(start, r):
    """Several times the limit: in no window of one second more admissions than 100 for the
    leased descriptor, nor than 30 for the exact one that shares some requests with it (its
    refusals give the leased permits back into their leases); both limits are reached."""
    s = start(TIGHT)
    answers, failures = load(
        s, 3.0, 6, lambda t, i: [[("hot", "x")]] if t % 2 else [[("hot", "x")], [("user", "u")]]
    )
    assert failures == []
    admitted = [(a, b, descs) for a, b, descs, resp in answers if resp.overall_code == OK]
    hot = [(a, b) for a, b, _ in admitted]
    user = [(a, b) for a, b, descs in admitted if len(descs) == 2]
    assert len(answers) > len(admitted) > 0
    assert most_in_a_window(hot, 1000) <= 100
    assert most_in_a_window(user, 1000) <= 30
    # Refused requests: OVER_LIMIT on the descriptor that was full.
    for *_, descs, resp in answers:
        if resp.overall_code == OVER:
            assert any(st.code == OVER for st in resp.statuses)
    # Every admission counted in Redis within the last window, and no more than the limit.
    assert logged(r, key(("hot", "x")), 1, 100) <= 100


LONG = """
domain: d
descriptors:
  - key: hot
    rate_limit: {unit: minute, requests_per_unit: 1000, lease: {size: 50, duration_ms: %d}}
"""


def ask_n(s: Service, n: int) -> None:
    for _ in range(n):
        assert s.ask("d", [("hot", "x")]).overall_code == OK


@pytest.mark.each_server
def test_unused_permits_go_back_on_shutdown(tmp_path, redis_server, r):
    """60 requests: the first 49 exact, then the key is busy (50 within the lease's duration)
    and one lease of 50 serves the rest; the log holds 49 + 50. SIGTERM gives the 39 unused
    back: the log holds the 60 requests."""
    s = Service(write_config(tmp_path, LONG % 60000), redis_server.url)
    k = key(("hot", "x"))
    try:
        ask_n(s, 60)
        assert logged(r, k, 60, 1000) == 99
    finally:
        err = s.close()
    assert s.proc.returncode == 0, err
    assert "leases closed, 39 unused permits given back" in err
    assert logged(r, k, 60, 1000) == 60


def test_unused_permits_go_back_at_the_leases_end(module_only, start, r):
    s = start(LONG % 1000)
    k = key(("hot", "x"))
    ask_n(s, 60)
    # Unless a second passed in between: then the lease already ended.
    assert logged(r, k, 60, 1000) in (99, 60)
    wait_for("the lease's end", lambda: logged(r, k, 60, 1000) == 60)
    # The key was not busy for that lease: exact again, one call per request.
    r.config_resetstat()
    ask_n(s, 10)
    assert calls(r).get("slidingwindow.allowall") == 10
    assert logged(r, k, 60, 1000) == 70


def test_a_reload_changes_then_removes_the_lease(module_only, tmp_path, redis_server, r):
    config = write_config(tmp_path, LONG % 60000)
    s = Service(config, redis_server.url, "--reload-interval", "50ms")
    k = key(("hot", "x"))
    try:
        ask_n(s, 60)
        assert logged(r, k, 60, 1000) == 99
        # A new size: the old lease's 39 unused permits go back, the new one is taken once the
        # key is busy again (20 requests): 19 exact, then a lease of 20 for the other 11.
        config.write_text((LONG % 60000).replace("size: 50", "size: 20"))
        wait_for("the old lease given back", lambda: logged(r, k, 60, 1000) == 60)
        ask_n(s, 30)
        assert logged(r, k, 60, 1000) == 60 + 19 + 20
        # No lease: its 9 unused permits go back, and every request is one exact call.
        config.write_text((LONG % 60000).replace(", lease: {size: 50, duration_ms: 60000}", ""))
        wait_for("the lease given back", lambda: logged(r, k, 60, 1000) == 90)
        r.config_resetstat()
        ask_n(s, 10)
        assert calls(r).get("slidingwindow.allowall") == 10
        assert logged(r, k, 60, 1000) == 100
    finally:
        err = s.close()
    assert "leases the config no longer has closed, 39 unused permits given back" in err
    assert "leases the config no longer has closed, 9 unused permits given back" in err
    assert "leases closed" not in err.replace("leases the config no longer has closed", ""), err


def test_a_bad_lease_stops_the_service_with_file_and_path(tmp_path, redis_server):
    bad = write_config(
        tmp_path,
        """
        domain: d
        descriptors:
          - key: hot
            rate_limit: {unit: second, requests_per_unit: 10, lease: {size: 11, duration_ms: 100}}
        """,
    )
    import subprocess

    from conftest import service_binary

    p = subprocess.run(
        [service_binary(), "--config", str(bad), "--redis", redis_server.url, "--listen", "127.0.0.1:0"],
        capture_output=True, text=True, timeout=30,
    )
    assert p.returncode == 2
    assert (
        f"config error: {bad}: descriptors[0].rate_limit.lease.size: "
        "a lease holds at most the limit's requests_per_unit (10), not 11"
    ) in p.stderr
