"""The backend (`--backend auto|module|script`, SLIDINGWINDOW_BACKEND): on a server without the
module (`enable-module-command no`, as managed Redis and Valkey are) the service started with no
backend flag runs the Lua script and is exact, all or none across descriptors; `module` there
refuses to start; a server that loses the script path is a configuration error (NOT_SERVING,
counted, logged, OVER_LIMIT whatever --on-redis-error says), served again once it is fixed. A
3-master cluster without the module: exact, all or none within a domain's slot."""

from __future__ import annotations

import os
import subprocess

from conftest import Service, service_binary, write_config
from slidingwindow_testkit import DEADLINE_S, Cluster, wait_for
from test_service import CONFIG, OK, OVER, key


def test_exact_and_all_or_none_without_the_module(start, plain, plain_server):
    s = start(CONFIG, redis_url=plain_server.url)
    user = [("user", "u1")]
    assert [s.ask("shop", user).overall_code for _ in range(4)] == [OK, OK, OK, OVER]
    both = ([("route", "search")], [("route", "checkout")])
    first = s.ask("shop", *both)
    assert [st.limit_remaining for st in first.statuses] == [9, 0]
    second = s.ask("shop", *both)
    assert [st.code for st in second.statuses] == [OK, OVER]
    # Descriptor 1 had room but was not charged.
    assert plain.zcard(key(("route", "search"))) == 1
    assert plain.zcard(key(("user", "u1"))) == 3
    assert "envoy-ratelimit: backend script (auto: the server has no slidingwindow module" in s.close()


def test_the_module_backend_without_the_module_refuses_to_start(tmp_path, plain_server):
    config = write_config(tmp_path, CONFIG)
    base = [service_binary(), "--config", str(config), "--redis", plain_server.url, "--listen", "127.0.0.1:0"]
    env = {k: v for k, v in os.environ.items() if k != "SLIDINGWINDOW_BACKEND"}
    for args, extra in [(["--backend", "module"], {}), ([], {"SLIDINGWINDOW_BACKEND": "module"})]:
        got = subprocess.run(base + args, env={**env, **extra}, capture_output=True, text=True,
                             timeout=DEADLINE_S, stdin=subprocess.DEVNULL)
        assert got.returncode == 1, got
        assert got.stdout == "", got
        assert ("envoy-ratelimit: configuration error: backend module: the server has no "
                "SLIDINGWINDOW.ALLOW") in got.stderr, got.stderr


def test_a_lost_script_path_is_not_serving(start, plain, plain_server):
    s = start(CONFIG, "--health-interval", "100ms", "--metrics-listen", "127.0.0.1:0",
              redis_url=plain_server.url)
    user = [("user", "u1")]
    assert s.ask("shop", user).overall_code == OK
    wait_for("SERVING", lambda: s.health_status() == "SERVING")
    plain.script_flush()
    plain.execute_command("ACL", "SETUSER", "default", "-script")
    try:
        # Not "Redis away" (--on-redis-error open would answer OK): never unlimited.
        assert s.ask("shop", user).overall_code == OVER
        assert s.health_status() == "NOT_SERVING"
        m = s.metrics()
        assert m['ratelimit_service_should_rate_limit_error{err_type="redis_config_error"}'] == 1
        assert m['ratelimit_service_should_rate_limit_error{err_type="redis_error"}'] == 0
    finally:
        plain.execute_command("ACL", "SETUSER", "default", "+script")
    wait_for("SERVING again", lambda: s.health_status() == "SERVING")
    assert s.ask("shop", user).overall_code == OK
    err = s.close()
    assert "configuration error: SCRIPT LOAD answered NOPERM" in err, err
    assert "allow SCRIPT and EVALSHA, or load the module" in err, err


def test_a_three_master_cluster_without_the_module(tmp_path):
    """Three domains, each a hash tag on a master of its own (slots 3,808, 7,653 and 13,556),
    every master a seed: each domain's limits exact, its descriptors charged all or none."""
    domains = ["shop", "blog", "docs"]
    cluster = Cluster(with_module=False)
    try:
        config = tmp_path / "config"
        config.mkdir()
        for d in domains:
            write_config(config, CONFIG.replace("domain: shop", f"domain: {d}"), f"{d}.yaml")
        s = Service(config, [n.url for n in cluster.nodes], "--cluster")
        try:
            c = cluster.client()
            for d in domains:
                user = [("user", "u1")]
                assert [s.ask(d, user).overall_code for _ in range(4)] == [OK, OK, OK, OVER], d
                both = ([("route", "search")], [("route", "checkout")])
                assert [st.code for st in s.ask(d, *both).statuses] == [OK, OK], d
                assert [st.code for st in s.ask(d, *both).statuses] == [OK, OVER], d
                # Descriptor 1 had room but was not charged.
                assert c.zcard(f"ratelimit:{{{d}}}:route=search") == 1, d
                assert c.zcard(f"ratelimit:{{{d}}}:user=u1") == 3, d
            # Every master holds one domain's three keys.
            assert [n.client().dbsize() for n in cluster.nodes] == [3, 3, 3]
        finally:
            err = s.close()
        assert "envoy-ratelimit: backend script (auto: " in err, err
    finally:
        cluster.close()
