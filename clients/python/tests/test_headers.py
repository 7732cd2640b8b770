"""The shared header spec (spec/headers.json, made by testkit): every reply's headers, variant
``gateway``, exactly; keyed limits (ALLOWALL's) as ``{key: limits}``."""

from __future__ import annotations

import json
import pathlib

from slidingwindow import Limit, Result, headers

SPEC = json.loads((pathlib.Path(__file__).parents[3] / "spec" / "headers.json").read_text())


def test_every_header_case():
    for case in SPEC["cases"]:
        listed = case["limits"]
        limits = [Limit(l["window"], l["max"]) for l in listed]
        keyed = {}
        for l, limit in zip(listed, limits):
            keyed.setdefault(f"k{l['key']}", []).append(limit)
        r = case["reply"]
        result = Result(r["allowed"], r["count"], r["remaining"], r["retry_after_ms"], r["reset_after_ms"], r["limit"])
        got = headers(result, keyed if len(keyed) > 1 else limits, [l["name"] for l in listed])
        assert list(got.items()) == [tuple(h) for h in case["headers"]["gateway"]], case["name"]
    assert len(SPEC["cases"]) > 30
