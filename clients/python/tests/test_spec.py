"""The shared spec (spec/cases.json, made from the contract's model): every call through the
helper's raw calls, on both paths (module and script), each reply and error exactly."""

from __future__ import annotations

import json
import pathlib

import pytest
import redis

from slidingwindow import SlidingWindow

SPEC = json.loads((pathlib.Path(__file__).parents[3] / "spec" / "cases.json").read_text())


def run(sw: SlidingWindow, argv):
    command, args = argv[0].lower(), argv[1:]
    if command in ("allowall", "peekall"):
        return sw.call_keys(command, args)
    return sw.call(command, args[0], args[1:])


def replay(sw, key: str, settle=lambda answer: answer):
    """Every case through ``sw``'s raw calls; ``settle`` turns a call's answer into its reply (the
    asyncio helper's answers are awaitables)."""
    calls = 0
    for i, case in enumerate(SPEC["cases"]):
        tag = "{" + f"{key[4:-1]}-{i}" + "}"
        for call in case["calls"]:
            argv = [w.replace("{t}", tag) for w in call["argv"]]
            if "error" in call:
                with pytest.raises(redis.ResponseError) as e:
                    settle(run(sw, argv))
                # redis-py leaves out the leading "ERR " of an error line.
                want = call["error"].removeprefix("ERR ")
                assert str(e.value).removeprefix("ERR ") == want, (case["name"], argv)
            else:
                assert settle(run(sw, argv)) == call["reply"], (case["name"], argv)
            calls += 1
    assert calls > 400


def test_every_case(path, key):
    _, server = path
    replay(SlidingWindow(server.client()), key)
