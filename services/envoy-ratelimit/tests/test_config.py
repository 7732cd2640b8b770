"""Config parity with envoyproxy/ratelimit. The fixtures under fixtures/ were written here from the
reference's README and the behaviour of its parser (src/config): every file in fixtures/accept is
one the reference loads, and loads here, and is then checked with requests; every file in
fixtures/refuse is one the reference refuses, and stops this service before it listens, with exit
status 2 and one line naming the file and the path inside it (its first line says which)."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest
from envoy_data_plane.envoy.service.ratelimit.v3 import (
    RateLimitResponseCode as Code,
    RateLimitResponseRateLimitUnit as Unit,
)

from conftest import Service, descriptor, service_binary, write_config

FIXTURES = Path(__file__).resolve().parent / "fixtures"
OK, OVER = Code.OK, Code.OVER_LIMIT
U32_MAX = 2**32 - 1


def run(config, *flags, env=None) -> subprocess.CompletedProcess:
    return subprocess.run(
        [service_binary(), "--config", str(config), "--listen", "127.0.0.1:0", "--redis", "redis://127.0.0.1:1", *flags],
        stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=30, env=env,
    )


@pytest.mark.parametrize("path", sorted((FIXTURES / "refuse").glob("*.yaml")), ids=lambda p: p.stem)
def test_what_the_reference_refuses_is_refused(path):
    message = path.read_text().splitlines()[0].removeprefix("# refused: ")
    p = run(path)
    assert p.returncode == 2, p.stderr
    assert p.stdout == ""
    assert p.stderr.startswith(f"envoy-ratelimit: config error: {path}: "), p.stderr
    assert message in p.stderr
    assert len(p.stderr.splitlines()) == 1


def limit_of(st):
    return None if st.current_limit is None else (st.current_limit.requests_per_unit, st.current_limit.unit)


def check_basic(s, r):
    (st,) = s.ask("mongo_cps", [("database", "users")]).statuses
    assert (limit_of(st), st.limit_remaining) == ((500, Unit.SECOND), 499)
    assert s.ask("mongo_cps", [("database", "other")]).statuses[0].current_limit is None


def check_nested(s, r):
    st = s.ask("messaging", [("message_type", "marketing"), ("to_number", "2061111111")]).statuses[0]
    assert limit_of(st) == (5, Unit.DAY)
    assert limit_of(s.ask("messaging", [("to_number", "2061111111")]).statuses[0]) == (100, Unit.DAY)
    assert s.ask("messaging", [("remote_address", "50.0.0.5")]).overall_code == OVER
    assert limit_of(s.ask("messaging", [("remote_address", "50.0.0.1")]).statuses[0]) == (10, Unit.SECOND)


def check_unlimited(s, r):
    for key in ("ldap", "kerberos"):
        resp = s.ask("internal", [(key, "x")])
        assert (resp.overall_code, resp.statuses[0].limit_remaining) == (OK, U32_MAX)
    assert limit_of(s.ask("internal", [("azure", "x")]).statuses[0]) == (100, Unit.MINUTE)
    assert r.keys("*") == [b"ratelimit:{internal}:azure=x"]


def check_shadow(s, r):
    a = [("service", "auth"), ("user", "user-a")]
    b = [("service", "auth"), ("user", "user-b")]
    assert [s.ask("example6", a).overall_code for _ in range(3)] == [OK, OK, OK]
    assert [s.ask("example6", b).overall_code for _ in range(2)] == [OK, OVER]


def check_replaces(s, r):
    banned = [("foo", "x"), ("bar", "banned")]
    override = [("source_cluster", "proxy"), ("destination_cluster", "override")]
    assert s.ask("rl", banned).overall_code == OVER
    resp = s.ask("rl", banned, override)
    # The replaced limit is dropped (no limit reported), the replacing one applies.
    assert resp.overall_code == OK
    assert [limit_of(st) for st in resp.statuses] == [None, (10, Unit.SECOND)]


def check_detailed_metric(s, r):
    assert limit_of(s.ask("example8", [("key1", "anything")]).statuses[0]) == (10, Unit.MINUTE)
    assert limit_of(s.ask("example8", [("key1", "value1")]).statuses[0]) == (20, Unit.MINUTE)


def check_wildcards(s, r):
    cases = [
        (("key1", "valueXYZ"), 20),
        (("path", "/api/123/action"), 21),
        (("path", "/api/user-id/action"), 21),
        (("path", "/api/123/other"), None),
        (("route", "/api/v1/resource/123/action"), 22),
        (("route", "/api/v1/resource/123"), None),
        (("midWild", "barab"), 20),
        (("midWild", "bab"), None),
    ]
    for entry, rpu in cases:
        st = s.ask("example9", [entry]).statuses[0]
        assert limit_of(st) == (None if rpu is None else (rpu, Unit.MINUTE)), entry


def check_value_to_metric(s, r):
    st = s.ask("example10", [("route", "api"), ("http_method", "GET"), ("subject_id", "1")]).statuses[0]
    assert limit_of(st) == (60, Unit.MINUTE)


def check_share_threshold(s, r):
    codes = [s.ask("example11", [("files", f"files/{i}.pdf")]).overall_code for i in range(11)]
    assert codes == [OK] * 10 + [OVER]
    assert r.keys("ratelimit:{example11}:files=*") == [b"ratelimit:{example11}:files=files/*"]
    codes = [s.ask("example11", [("files_no_share", f"files_no_share/{i}")]).overall_code for i in range(11)]
    assert codes == [OK] * 11


def check_quota_metadata(s, r):
    free, spare = [("plan", "free")], [("plan", "spare")]
    assert s.ask("quota", free).overall_code == OK
    # One quota over and another with room: OK, the full one reported over.
    resp = s.ask("quota", free, spare)
    assert (resp.overall_code, [st.code for st in resp.statuses]) == (OK, [OVER, OK])
    # Every quota over: refused, and nothing charged.
    resp = s.ask("quota", free, spare)
    assert (resp.overall_code, [st.code for st in resp.statuses]) == (OVER, [OVER, OVER])
    assert r.zcard("ratelimit:{quota}:plan=spare") == 1


def check_units(s, r):
    expect = {"s": (1, Unit.SECOND, 1), "w": (1, Unit.WEEK, 604_800), "m": (2, Unit.MONTH, 2_592_000),
              "y": (3, Unit.YEAR, 31_536_000)}
    for key, (rpu, unit, seconds) in expect.items():
        st = s.ask("units", [(key, "v")]).statuses[0]
        assert limit_of(st) == (rpu, unit)
        # A rolling window of the reference's divider: the log lives as long as the window.
        ttl = r.pttl(f"ratelimit:{{units}}:{key}=v")
        assert seconds * 1000 - 60_000 < ttl <= seconds * 1000
    # requests_per_unit left out: 0, every request over the limit.
    resp = s.ask("units", [("none", "v")])
    assert (resp.overall_code, limit_of(resp.statuses[0])) == (OVER, (0, Unit.HOUR))
    assert limit_of(s.ask("units", [("blank", "any")]).statuses[0]) == (4, Unit.MINUTE)
    # `value: 0123` is the text 0123, and `shadow_mode: yes` is true.
    st = s.ask("units", [("zip", "0123")]).statuses[0]
    assert limit_of(st) == (5, Unit.MINUTE)
    assert [s.ask("units", [("zip", "0123")]).overall_code for _ in range(6)] == [OK] * 6


CHECKS = {
    "basic": check_basic,
    "nested": check_nested,
    "unlimited": check_unlimited,
    "shadow": check_shadow,
    "replaces": check_replaces,
    "detailed_metric": check_detailed_metric,
    "wildcards": check_wildcards,
    "value_to_metric": check_value_to_metric,
    "share_threshold": check_share_threshold,
    "quota_metadata": check_quota_metadata,
    "units": check_units,
}


def test_every_accept_fixture_has_its_check():
    assert sorted(p.stem for p in (FIXTURES / "accept").glob("*.yaml")) == sorted(CHECKS)


@pytest.mark.parametrize("name", sorted(CHECKS))
def test_what_the_reference_accepts_loads_and_answers(name, redis_server, r):
    s = Service(FIXTURES / "accept" / f"{name}.yaml", redis_server.url)
    try:
        CHECKS[name](s, r)
    finally:
        s.close()


def test_directory_duplicate_domain_unless_merged(tmp_path, redis_server, r):
    write_config(tmp_path, "domain: d\ndescriptors:\n  - key: a\n    rate_limit: {unit: second, requests_per_unit: 1}\n", "a.yaml")
    write_config(tmp_path, "domain: d\ndescriptors:\n  - key: b\n    rate_limit: {unit: second, requests_per_unit: 2}\n", "b.yml")
    p = run(tmp_path)
    assert p.returncode == 2
    assert f"{tmp_path / 'b.yml'}: domain: domain \"d\" is already defined in {tmp_path / 'a.yaml'}" in p.stderr
    # MERGE_DOMAIN_CONFIG, as the flag or the reference's environment variable.
    for flags, env in [(["--merge-domain-config"], None), ([], {**os.environ, "MERGE_DOMAIN_CONFIG": "true"})]:
        s = Service(tmp_path, redis_server.url, *flags, env=env)
        try:
            assert limit_of(s.ask("d", [("a", "x")]).statuses[0]) == (1, Unit.SECOND)
            assert limit_of(s.ask("d", [("b", "x")]).statuses[0]) == (2, Unit.SECOND)
        finally:
            s.close()
    # A repeated entry across merged files is refused as within one file.
    write_config(tmp_path, "domain: d\ndescriptors:\n  - key: a\n", "c.yaml")
    p = run(tmp_path, "--merge-domain-config")
    assert p.returncode == 2 and "duplicate descriptor composite key 'd.a'" in p.stderr


def test_missing_file_and_empty_directory(tmp_path):
    p = run(tmp_path / "nope.yaml")
    assert p.returncode == 2 and f"{tmp_path / 'nope.yaml'}: " in p.stderr
    (tmp_path / "empty").mkdir()
    p = run(tmp_path / "empty")
    assert p.returncode == 2 and "no *.yaml or *.yml file in this directory" in p.stderr


def test_directory_loads_every_file_and_warns_once_about_ignored_fields(tmp_path, redis_server, r):
    write_config(tmp_path, "domain: a\ndescriptors:\n  - key: k\n    unit: second\n"
                 "    rate_limit: {unit: second, requests_per_unit: 1}\n", "a.yaml")
    write_config(tmp_path, "domain: b\ndescriptors:\n  - key: k\n"
                 "    rate_limit: {unit: minute, requests_per_unit: 2, domain: x}\n", "b.yaml")
    write_config(tmp_path, "not: [yaml", "notes.txt")
    s = Service(tmp_path, redis_server.url)
    try:
        assert s.ask("a", [("k", "v")]).statuses[0].current_limit.requests_per_unit == 1
        assert s.ask("b", [("k", "v")]).statuses[0].current_limit.requests_per_unit == 2
    finally:
        err = s.close()
    warnings = [line for line in err.splitlines() if "warning" in line]
    assert warnings == [
        "envoy-ratelimit: warning: ignoring, as the reference does: "
        f"{tmp_path / 'a.yaml'}: descriptors[0].unit (has no meaning here), "
        f"{tmp_path / 'b.yaml'}: descriptors[0].rate_limit.domain (has no meaning here)"
    ]
