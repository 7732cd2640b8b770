"""The shared lease scenarios (spec/leases.json, made from testkit's model of the helpers' lease
policy): each replayed on the lease object with a fake clock, on both paths: the replies, the
permits returned, and the calls each step sends, counted by the server's commandstats (reset
before each step): by command on the module path, as script runs on the script's."""

from __future__ import annotations

import json
import pathlib

import pytest

from slidingwindow import SCRIPT, Limit, Result, SlidingWindow
from slidingwindow_testkit import command_calls

SPEC = json.loads((pathlib.Path(__file__).parents[3] / "spec" / "leases.json").read_text())
COUNTED = ("allow", "peek", "refund")


def figures(r: Result):
    return [int(r.allowed), r.count, r.remaining, r.retry_after_ms, r.reset_after_ms]


@pytest.mark.parametrize("scenario", SPEC["scenarios"], ids=[s["name"] for s in SPEC["scenarios"]])
def test_lease_scenario(path, key, scenario):
    name, server = path
    replay(server.client(), SlidingWindow(server.client(), use=name), key, scenario, name == "module")


def replay(c, sw, key: str, scenario, module: bool, settle=lambda answer: answer):
    """One scenario on ``sw``'s lease (``c``: a client of its server, for the commandstats;
    ``module``: whether ``sw`` takes the module path); ``settle`` turns an answer into its value (the asyncio helper's answers are awaitables)."""
    c.script_load(SCRIPT)  # on the script path, each call one EVALSHA
    tag = "{" + key[4:-1] + "}"
    at = [0]
    limits = [Limit(window, most) for window, most in scenario["limits"]]

    def make():
        return sw.lease(scenario["key"].replace("{t}", tag), limits, size=scenario["size"],
                        duration_ms=scenario["duration_ms"], clock=lambda: SPEC["t0"] + at[0])

    if scenario.get("invalid"):
        with pytest.raises(ValueError):
            make()
        assert scenario["steps"] == []
        return
    lease = make()
    try:
        for i, step in enumerate(scenario["steps"]):
            where = (scenario["name"], i, step)
            at[0] = step["at"]
            c.config_resetstat()
            if step["op"] == "allow":
                got = figures(settle(lease.allow()))
            elif step["op"] == "close":
                got = settle(lease.close())
            elif step["op"] == "call":
                argv = [w.replace("{t}", tag) for w in step["argv"]]
                assert settle(sw.call(argv[0].lower(), argv[1], argv[2:])) == step["reply"], where
                continue
            else:
                raise AssertionError(f"unknown op {step['op']!r}")
            want = step["reply"] if step["op"] == "allow" else step["returned"]
            assert (got, calls_since_reset(c)) == (want, expected_calls(module, step["calls"])), where
    finally:
        settle(lease.close())


def calls_since_reset(c):
    """The module's calls by command, or the script's runs."""
    after = command_calls(c)
    return after if "script" in after else {n: after.get(n, 0) for n in COUNTED}


def expected_calls(module: bool, calls):
    """A step's calls as ``calls_since_reset`` counts them: on the script path, each is one
    script run."""
    if not module:
        total = sum(calls.values())
        return {"script": total} if total else {n: 0 for n in COUNTED}
    return calls


def test_the_spec_has_scenarios():
    assert len(SPEC["scenarios"]) >= 5
    assert any(s.get("invalid") for s in SPEC["scenarios"])
    assert all(s.get("invalid") or s["steps"][-1]["op"] == "close" for s in SPEC["scenarios"])
