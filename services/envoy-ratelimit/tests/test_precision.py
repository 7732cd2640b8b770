"""Our `precision` extension (issue 36 item 3): `PRECISION p` on a limit's calls. Two services
on one Redis with the module's defaults and the compact storage, exact and leased, admit exactly
per the limit (the busiest second of the logged scores, read while the load runs as
test_fleet.py reads them) with the key holding at most (W + lease) / p + 2 distinct scores at
every poll; a request refused by another descriptor gives its charge back at the rounded score,
and `is_negative_hits` gives back the newest requests;
a bad precision stops the service with the file and the path; a server whose storage is `zset`
is warned about at start and on reload."""

from __future__ import annotations

import subprocess

import pytest

from conftest import Service, descriptor, service_binary, write_config
from slidingwindow_testkit import wait_for
from test_fleet import LEASED, TWO, two_services
from test_leases import OK, OVER, key, logged

P = 100


@pytest.mark.parametrize("leased", [False, True], ids=["exact", "leased"])
def test_two_services_with_precision_admit_per_the_limit_on_few_scores(module_only, start, r, leased):
    text = TWO % (", precision: 100" + (LEASED if leased else ""))
    label = f"{'leased' if leased else 'exact'} precision {P}"
    times, polls, report, errs = two_services(start, r, "compact", text, label)
    distinct = max(len(c) for _, c in polls)
    report += f", at most {distinct} distinct scores at once"
    print(f"at most {distinct} distinct scores at once")
    assert all(t % P == 0 for t in times), report
    # The contract's bound: (W + lease) / p + 2.
    assert distinct <= (1000 + (100 if leased else 0)) // P + 2, report
    assert not any("warning" in e for e in errs), errs


UNDO = """
domain: d
descriptors:
  - key: a
    rate_limit: {unit: minute, requests_per_unit: 100, precision: 1000}
  - key: b
    rate_limit: {unit: minute, requests_per_unit: 1}
"""


@pytest.mark.parametrize("storage", ["zset", "compact"])
def test_a_refused_request_gives_back_its_charge_at_the_rounded_score(module_only, start, r, storage):
    r.config_set("slidingwindow.storage", storage)
    try:
        s = start(UNDO)
        a = key(("a", "x"))
        assert s.ask("d", [("a", "x")], [("b", "x")]).overall_code == OK
        # b is full: the request is refused, and its charge on a goes back.
        assert s.ask("d", [("a", "x")], [("b", "x")]).overall_code == OVER
        # A request on a alone, at a score rounded up to 1000.
        assert s.ask("d", [("a", "x")]).overall_code == OK
        if storage == "compact":
            assert r.execute_command("SLIDINGWINDOW.CONVERT", a, "zset") == 2
        scores = [int(s) for _, s in r.zrange(a, 0, -1, withscores=True)]
        assert len(scores) == 2, scores
        assert all(t % 1000 == 0 for t in scores), scores
        # is_negative_hits: the newest requests go back, though logged after Redis's `now`.
        assert s.ask("d", [("a", "x")], hits_addend=5).overall_code == OK
        if storage == "compact":
            assert r.execute_command("SLIDINGWINDOW.CONVERT", a, "compact") == 7
        negative = descriptor([("a", "x")], hits_addend=6, is_negative_hits=True)
        assert s.ask("d", negative).overall_code == OK
        assert logged(r, a, 60, 100) == 1
    finally:
        r.config_set("slidingwindow.storage", "zset")


@pytest.mark.parametrize(
    "value, found",
    [("0", "0"), ("9007199254740993", "9007199254740993"), ("1s", "a string"), ("2.5", "a number with a fraction")],
)
def test_a_bad_precision_stops_the_service_with_file_and_path(tmp_path, redis_server, value, found):
    bad = write_config(
        tmp_path,
        f"""
        domain: d
        descriptors:
          - key: k
            rate_limit: {{unit: second, requests_per_unit: 10, precision: {value}}}
        """,
    )
    p = subprocess.run(
        [service_binary(), "--config", str(bad), "--redis", redis_server.url, "--listen", "127.0.0.1:0"],
        capture_output=True, text=True, timeout=30,
    )
    assert p.returncode == 2, p.stderr
    assert (
        f"config error: {bad}: descriptors[0].rate_limit.precision: "
        f"expected an integer number of ms from 1 to 9007199254740992, found {found}"
    ) in p.stderr


# 200 a second on `user`.
PRECISE = TWO
WARNING = "envoy-ratelimit: warning: precision in the config: slidingwindow.storage is zset"


def test_precision_on_a_zset_server_is_warned_about_at_start_and_on_reload(module_only, tmp_path, redis_server, r):
    assert r.config_get("slidingwindow.storage") == {"slidingwindow.storage": "zset"}
    err = start_and_close(tmp_path, redis_server, PRECISE % ", precision: 1000")
    assert err.count(WARNING) == 1, err
    # No precision: no warning; then a reload that adds one warns.
    config = write_config(tmp_path, PRECISE % "", "reloaded.yaml")
    s = Service(config, redis_server.url, "--reload-interval", "50ms")
    try:
        assert s.ask("d", [("user", "x")]).overall_code == OK
        # 1000 s: a request is then logged far after Redis's clock.
        config.write_text(PRECISE % ", precision: 1000000")
        k = key(("user", "x"))

        def rounded():
            # Answered (a far score counts in every window, so the limit may be reached).
            assert s.ask("d", [("user", "x")]).overall_code in (OK, OVER)
            secs, micros = r.time()
            now = secs * 1000 + micros // 1000
            return any(t > now + 10_000 for _, t in r.zrange(k, 0, -1, withscores=True))

        wait_for("the reloaded precision", rounded)
    finally:
        err = s.close()
    assert err.count(WARNING) == 1, err
    # The compact storage: nothing to warn about.
    r.config_set("slidingwindow.storage", "compact")
    try:
        err = start_and_close(tmp_path, redis_server, PRECISE % ", precision: 1000")
    finally:
        r.config_set("slidingwindow.storage", "zset")
    assert "warning" not in err, err


def start_and_close(tmp_path, redis_server, text: str) -> str:
    s = Service(write_config(tmp_path, text, "started.yaml"), redis_server.url)
    assert s.ask("d", [("user", "x")]).overall_code == OK
    return s.close()
