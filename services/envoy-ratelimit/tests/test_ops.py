"""Operating the service as the reference is operated: grpc.health.v1 health (and the
`healthcheck` subcommand an image runs), the reference image's environment variables, hot reload
(also under traffic), Prometheus /metrics with the reference's statistics, /json and /healthcheck, the
reference's RateLimit-Limit/-Remaining/-Reset headers."""

from __future__ import annotations

import json
import os
import subprocess
import threading
import types
import urllib.error
import urllib.request

from envoy_data_plane.envoy.service.ratelimit.v3 import RateLimitResponseCode as Code

from conftest import Service, service_binary, write_config
from slidingwindow_testkit import Server, free_port, wait_for

OK, OVER = Code.OK, Code.OVER_LIMIT

CONFIG = """
domain: shop
descriptors:
  - {key: user, rate_limit: {unit: minute, requests_per_unit: 3, name: per-user}}
  - {key: route, value: checkout, rate_limit: {unit: minute, requests_per_unit: 1}}
  - {key: bot, shadow_mode: true, rate_limit: {unit: minute, requests_per_unit: 1}}
  - {key: ip, detailed_metric: true, rate_limit: {unit: minute, requests_per_unit: 10}}
  - key: tenant
    value_to_metric: true
    descriptors:
      - {key: user, rate_limit: {unit: minute, requests_per_unit: 10}}
"""

NAMES = ["", "ratelimit", "envoy.service.ratelimit.v3.RateLimitService"]


def test_health_follows_redis(tmp_path):
    own = Server()
    s = Service(write_config(tmp_path, CONFIG), own.url, "--health-interval", "100ms", "--http-listen", "127.0.0.1:0")
    try:
        for name in NAMES:
            wait_for(f"{name!r} SERVING", lambda: s.health_status(name) == "SERVING")
        assert urllib.request.urlopen(f"http://{s.http}/healthcheck", timeout=10).read() == b"OK"
        own.stop()
        for name in NAMES:
            wait_for(f"{name!r} NOT_SERVING", lambda: s.health_status(name) == "NOT_SERVING")
        try:
            urllib.request.urlopen(f"http://{s.http}/healthcheck", timeout=10)
            raise AssertionError("healthcheck answered 200 with Redis down")
        except urllib.error.HTTPError as e:
            assert e.code == 500
        assert own.start()
        wait_for("SERVING again", lambda: s.health_status() == "SERVING")
    finally:
        s.close()
        own.close()


def post(s: Service, body: dict | str):
    data = body.encode() if isinstance(body, str) else json.dumps(body).encode()
    req = urllib.request.Request(f"http://{s.http}/json", data=data, method="POST")
    try:
        with urllib.request.urlopen(req, timeout=10) as f:
            return f.status, json.loads(f.read())
    except urllib.error.HTTPError as e:
        text = e.read()
        return e.code, json.loads(text) if e.code == 429 else text


def test_json_endpoint(start, r):
    s = start(CONFIG, "--http-listen", "127.0.0.1:0")
    body = {"domain": "shop", "descriptors": [{"entries": [{"key": "route", "value": "checkout"}]}]}
    status, resp = post(s, body)
    assert status == 200
    assert resp["overallCode"] == "OK"
    (st,) = resp["statuses"]
    assert st["currentLimit"] == {"requestsPerUnit": 1, "unit": "MINUTE"}
    assert "limitRemaining" not in st and st["durationUntilReset"] == "60s"
    status, resp = post(s, body)
    assert (status, resp["overallCode"], resp["statuses"][0]["code"]) == (429, "OVER_LIMIT", "OVER_LIMIT")
    # The proto names are accepted too; a bad body is 400.
    status, resp = post(s, {"domain": "shop", "descriptors": [{"entries": [{"key": "user", "value": "j"}]}], "hits_addend": 2})
    assert (status, resp["statuses"][0]["limitRemaining"]) == (200, 1)
    assert post(s, "{nope")[0] == 400
    assert post(s, {"domain": "shop", "descriptors": [], "extra": 1})[0] == 400
    assert post(s, {"domain": "", "descriptors": [{"entries": [{"key": "user", "value": "j"}]}]})[0] == 400


def test_reference_headers_and_their_names(start, r):
    s = start(CONFIG, "--limit-response-headers")
    resp = s.ask("shop", [("user", "h")], [("route", "checkout")])
    assert {h.key: h.value for h in resp.response_headers_to_add} == {
        "RateLimit-Limit": "1", "RateLimit-Remaining": "0", "RateLimit-Reset": "60"}
    resp = s.ask("shop", [("user", "h")], [("route", "checkout")])
    headers = {h.key: h.value for h in resp.response_headers_to_add}
    assert (headers["RateLimit-Limit"], headers["RateLimit-Remaining"]) == ("1", "0")
    assert 1 <= int(headers["RateLimit-Reset"]) <= 60
    # The reference's environment variables name them.
    env = {**os.environ, "LIMIT_RESPONSE_HEADERS_ENABLED": "true", "LIMIT_LIMIT_HEADER": "X-Limit",
           "LIMIT_REMAINING_HEADER": "X-Left", "LIMIT_RESET_HEADER": "X-Reset"}
    named = start(CONFIG, env=env)
    resp = named.ask("shop", [("user", "i")])
    assert {h.key: h.value for h in resp.response_headers_to_add} == {"X-Limit": "3", "X-Left": "2", "X-Reset": "60"}


def test_metrics(start, r):
    s = start(CONFIG, "--metrics-listen", "127.0.0.1:0")
    for _ in range(4):
        s.ask("shop", [("user", "m")])
    s.ask("shop", [("bot", "b")])
    s.ask("shop", [("bot", "b")])
    s.ask("shop", [("ip", "10.0.0.1")])
    s.ask("shop", [("tenant", "acme"), ("user", "u")])
    s.ask("nope", [("user", "x")])
    m = s.metrics()
    stat = lambda name, labels: m[f"ratelimit_service_rate_limit_{name}{{{labels}}}"]  # noqa: E731
    user = 'domain="shop",key1="user"'
    # 4 hits on a limit of 3 (near past 2.4, floored: 2): 3 within, the 3rd near, the 4th over.
    assert [stat(n, user) for n in ("total_hits", "within_limit", "over_limit", "near_limit")] == [4, 3, 1, 1]
    bot = 'domain="shop",key1="bot"'
    assert (stat("total_hits", bot), stat("over_limit", bot), stat("shadow_mode", bot)) == (2, 1, 1)
    # detailed_metric: the value in the key (an IPv4 address's dots made underscores, as there).
    assert stat("total_hits", 'domain="shop",key1="ip_10_0_0_1"') == 1
    # value_to_metric: the tenant's value in the key, the key-only user without one.
    assert stat("total_hits", 'domain="shop",key1="tenant_acme",key2="user"') == 1
    assert m['ratelimit_service_rate_limit_domain_not_found{domain="nope"}'] == 1
    assert m['ratelimit_service_total_requests{grpc_method="ShouldRateLimit"}'] == 9
    assert m["ratelimit_service_config_load_success{}"] == 1
    assert m['ratelimit_service_redis_latency_seconds_count{}'] >= 8
    # The descriptor keys refused most (--metrics-top, default 10): user m's 4th hit; the shadow
    # limit's refusal of bot b is not counted.
    top = {k: v for k, v in m.items() if k.startswith("ratelimit_service_top_refused{")}
    assert top == {'ratelimit_service_top_refused{key="ratelimit:{shop}:user=m"}': 1}
    assert m['ratelimit_service_top_refused_error{key="ratelimit:{shop}:user=m"}'] == 0
    assert m["ratelimit_service_top_refused_counted_total"] == 1
    assert m['ratelimit_service_should_rate_limit_error{err_type="redis_error"}'] == 0


def test_metrics_count_redis_errors(tmp_path):
    own = Server()
    s = Service(write_config(tmp_path, CONFIG), own.url, "--metrics-listen", "127.0.0.1:0")
    try:
        assert s.ask("shop", [("user", "e")]).overall_code == OK
        own.stop()
        assert s.ask("shop", [("user", "e")]).overall_code == OK
        assert s.metrics()['ratelimit_service_should_rate_limit_error{err_type="redis_error"}'] == 1
    finally:
        s.close()
        own.close()


def test_reload_keeps_the_last_good_config_under_traffic(tmp_path, redis_server, r):
    config = write_config(tmp_path, CONFIG)
    s = Service(config, redis_server.url, "--reload-interval", "50ms", "--metrics-listen", "127.0.0.1:0")
    stop = threading.Event()
    seen, failures = [], []
    # Each client's answers in its own order: a client's next request starts after its last answer.
    mine = [[] for _ in range(4)]

    def traffic(t: int):
        import grpc
        from envoy_data_plane.envoy.service.ratelimit.v3 import RateLimitRequest, RateLimitServiceSyncStub
        from conftest import descriptor

        with grpc.insecure_channel(s.addr) as ch:
            stub = RateLimitServiceSyncStub(ch)
            i = 0
            while not stop.is_set():
                i += 1
                try:
                    resp = stub.should_rate_limit(RateLimitRequest(domain="shop", descriptors=[descriptor([("route", f"r{i}")])]))
                    st = resp.statuses[0]
                    v = None if st.current_limit is None else st.current_limit.requests_per_unit
                    mine[t].append(v)
                    seen.append(v)
                except Exception as e:  # noqa: BLE001 (any failure fails the test below)
                    failures.append(e)

    threads = [threading.Thread(target=traffic, args=(t,)) for t in range(4)]
    for t in threads:
        t.start()
    try:
        wait_for("traffic", lambda: len(seen) > 50)
        assert set(seen) == {None}
        # A good change: any route gets 7 a minute.
        config.write_text(CONFIG + "  - key: route\n    rate_limit: {unit: minute, requests_per_unit: 7}\n")
        wait_for("the new config in force", lambda: seen[-1] == 7)
        # A bad change: logged, counted, and the last good config stays.
        config.write_text(CONFIG + "  - key: route\n    rate_limit: {unit: fortnight}\n")
        wait_for("the error counted", lambda: s.metrics()["ratelimit_service_config_load_error{}"] == 1)
        n = len(seen)
        wait_for("more traffic", lambda: len(seen) > n + 50)
        assert set(seen[n:]) == {7}
        # Fixed again: reloaded.
        config.write_text(CONFIG + "  - key: route\n    rate_limit: {unit: minute, requests_per_unit: 8}\n")
        wait_for("the fixed config in force", lambda: seen[-1] == 8)
    finally:
        stop.set()
        for t in threads:
            t.join()
        err = s.close()
    assert failures == []
    # Every answer came from one whole config: to each client none, then 7, then 8 (a slow client
    # may miss one), never back. (Across clients, an answer from the old config to a request sent
    # before a reload may arrive after another client's answer from the new one.)
    assert set(seen) == {None, 7, 8}
    for answers in mine:
        changes = [v for i, v in enumerate(answers) if i == 0 or answers[i - 1] != v]
        assert changes == [v for v in (None, 7, 8) if v in changes], changes
    assert s.metrics_addr
    assert "config error, keeping the last good config: " in err and "invalid rate limit unit 'fortnight'" in err
    assert err.count("config reloaded: 1 domain(s) from 1 file(s)") == 2


def healthcheck(*args: str, env: dict | None = None) -> subprocess.CompletedProcess:
    return subprocess.run(
        [service_binary(), "healthcheck", *args], capture_output=True, text=True, timeout=30, env=env
    )


def test_healthcheck_subcommand_follows_health(tmp_path):
    own = Server()
    s = Service(write_config(tmp_path, CONFIG), own.url, "--health-interval", "100ms")
    try:
        wait_for("SERVING", lambda: s.health_status() == "SERVING")
        for name in NAMES:
            r = healthcheck("--listen", s.addr, "--service", name)
            assert r.returncode == 0, r
        own.stop()
        wait_for("NOT_SERVING", lambda: s.health_status() == "NOT_SERVING")
        r = healthcheck("--listen", s.addr)
        assert r.returncode == 1 and "NOT_SERVING" in r.stderr, r
    finally:
        s.close()
        own.close()
    r = healthcheck("--listen", s.addr, "--timeout", "1s")
    assert r.returncode == 1 and "connect" in r.stderr, r


def test_the_reference_image_environment(tmp_path, redis_server, r):
    """envoyproxy/ratelimit's variables alone configure the service: the config from
    RUNTIME_ROOT/RUNTIME_SUBDIRECTORY/config, Redis from REDIS_URL, gRPC on GRPC_HOST:GRPC_PORT,
    HTTP on HOST:PORT; the healthcheck finds the service from the same variables."""
    config = tmp_path / "rl" / "config"
    config.mkdir(parents=True)
    write_config(config, CONFIG, "shop.yaml")
    grpc_port, http_port = free_port(), free_port()
    env = {
        **os.environ,
        "RUNTIME_ROOT": str(tmp_path),
        "RUNTIME_SUBDIRECTORY": "rl",
        "REDIS_SOCKET_TYPE": "tcp",
        "REDIS_URL": f"127.0.0.1:{redis_server.port}",
        "GRPC_HOST": "127.0.0.1",
        "GRPC_PORT": str(grpc_port),
        "HOST": "127.0.0.1",
        "PORT": str(http_port),
        "USE_STATSD": "false",
        "CACHE_KEY_PREFIX": "img_",
    }
    proc = subprocess.Popen(
        [service_binary()], stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env
    )
    try:
        assert proc.stdout.readline().strip() == f"listening on 127.0.0.1:{grpc_port}"
        assert proc.stdout.readline().strip() == f"http on 127.0.0.1:{http_port}"
        s = types.SimpleNamespace(http=f"127.0.0.1:{http_port}")
        status, resp = post(s, {"domain": "shop", "descriptors": [{"entries": [{"key": "route", "value": "checkout"}]}]})
        assert (status, resp["overallCode"]) == (200, "OK")
        status, resp = post(s, {"domain": "shop", "descriptors": [{"entries": [{"key": "route", "value": "checkout"}]}]})
        assert (status, resp["overallCode"]) == (429, "OVER_LIMIT")
        assert r.keys("img_*"), "no key with CACHE_KEY_PREFIX"
        r = healthcheck(env={**os.environ, "GRPC_PORT": str(grpc_port)})
        assert r.returncode == 0, r
    finally:
        proc.terminate()
        _, err = proc.communicate(timeout=10)
    assert "warning" not in err, err
