"""The shared lease scenarios (spec/leases.json, made from testkit's model of the helpers' lease
policy): each replayed on the lease object with a fake clock, on the module path (the calls it
sends are counted by the server's commandstats, reset before each step, which the script path
has none of)."""

from __future__ import annotations

import json
import pathlib

import pytest

from slidingwindow import Limit, Result, SlidingWindow
from slidingwindow_testkit import command_calls

SPEC = json.loads((pathlib.Path(__file__).parents[3] / "spec" / "leases.json").read_text())
COUNTED = ("allow", "peek", "refund")


def figures(r: Result):
    return [int(r.allowed), r.count, r.remaining, r.retry_after_ms, r.reset_after_ms]


@pytest.mark.parametrize("scenario", SPEC["scenarios"], ids=[s["name"] for s in SPEC["scenarios"]])
def test_lease_scenario(module_server, key, scenario):
    c = module_server.client()
    sw = SlidingWindow(c, use="module")
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
                got = figures(lease.allow())
            elif step["op"] == "close":
                got = lease.close()
            elif step["op"] == "call":
                argv = [w.replace("{t}", tag) for w in step["argv"]]
                assert sw.call(argv[0].lower(), argv[1], argv[2:]) == step["reply"], where
                continue
            else:
                raise AssertionError(f"unknown op {step['op']!r}")
            after = command_calls(c)  # the module's only: no script ran since the reset
            want = step["reply"] if step["op"] == "allow" else step["returned"]
            assert (got, {n: after.get(n, 0) for n in COUNTED}) == (want, step["calls"]), where
    finally:
        lease.close()


def test_the_spec_has_scenarios():
    assert len(SPEC["scenarios"]) >= 5
    assert any(s.get("invalid") for s in SPEC["scenarios"])
    assert all(s.get("invalid") or s["steps"][-1]["op"] == "close" for s in SPEC["scenarios"])
