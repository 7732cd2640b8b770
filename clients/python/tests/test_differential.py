"""The Lua path against the module, on one server that has the module loaded: the same seeded
random call streams go to twin keys, one driven by SLIDINGWINDOW.*, one by the script, and a third
by either at random (the keys are interchangeable). Replies, scores and TTLs must agree. The script
is also held to a plain model of the contract, so its several-limit logic is checked on its own.
"""

from __future__ import annotations

import math
import random
from dataclasses import dataclass
from typing import Any, Dict, List, Optional, Tuple

import pytest
import redis

from slidingwindow import CROCKFORD, SlidingWindow

START = 1_700_000_000_000


@dataclass
class Stream:
    """A seeded call stream: its steps, the windows (seconds) and maxes its limits take, the per
    mille of steps that move time backwards and that jump over whole windows, and the most ms a
    step moves time forward otherwise."""

    name: str
    seed: int
    steps: int
    windows: Tuple[int, ...]
    maxes: Tuple[int, ...]
    back: int
    jump: int
    stride: int


@dataclass
class Scenario(Stream):
    #: Each step picks 1..most limits. A window of at least 60 s is always among them, so no key
    #: really expires (by the server's clock) during the run.
    most: int


SINGLE = [
    Scenario("steady", 1, 500, (60,), (5,), 0, 5, 20_000, 1),
    Scenario("varying", 2, 500, (60, 120, 300), (1, 3, 8), 40, 30, 15_000, 1),
    Scenario("bursty", 3, 500, (60,), (10, 20), 100, 20, 500, 1),
]
MULTI = [
    Scenario("two", 4, 500, (1, 2, 60), (2, 5, 10), 40, 20, 400, 2),
    Scenario("many", 5, 400, (1, 5, 10, 60, 120), (1, 3, 7, 12), 60, 30, 2_000, 5),
]


def draw_limits(rng: random.Random, sc: Scenario) -> List[Tuple[int, int]]:
    k = rng.randint(1, sc.most)
    limits = [(rng.choice(sc.windows), rng.choice(sc.maxes)) for _ in range(k)]
    if max(w for w, _ in limits) < 60:
        limits[rng.randrange(k)] = (60, rng.choice(sc.maxes))
    return limits


def model(scores: List[int], limits, now: int, cost: int, several: bool):
    """The contract's steps on a list of scores: (reply or error, scores after an ALLOW)."""
    reply, after = model_keys({0: scores}, [(0, w, m) for w, m in limits], now, cost)
    if isinstance(reply, str):
        return reply, scores
    return (reply if several else reply[:5]), after[0]


def model_keys(logs: Dict[Any, List[int]], limits, now: int, cost: int):
    """ALLOWALL's steps on each key's scores, limits as (key, window, max): (the six integers or
    the error, each key's scores after the call)."""
    wmax = {}
    for k, w, _ in limits:
        wmax[k] = max(wmax.get(k, 0), w * 1000)
    live = {k: [s for s in logs.get(k, []) if s > now - wmax[k]] for k in wmax}
    fits = all(cost <= m - sum(1 for s in live[k] if s > now - w * 1000) for k, w, m in limits)
    if fits and cost > 100_000:
        return f"error: cost {cost} would add more than 100000 members in one call", logs
    after = {k: sorted(v + [now] * cost) if fits else v for k, v in live.items()}
    per = []
    for k, w, m in limits:
        cutoff = now - w * 1000
        inside = [s for s in after[k] if s > cutoff]
        need = len(inside) + cost - m
        retry = -1 if cost > m else 0 if need <= 0 else max(0, math.ceil(inside[need - 1]) - cutoff)
        reset = max(0, math.ceil(max(inside)) - cutoff) if inside else 0
        per.append((max(0, m - len(inside)), retry, w, len(inside), reset))
    b = min(range(len(per)), key=lambda i: (per[i][0], -(math.inf if per[i][1] == -1 else per[i][1]), -per[i][2], i))
    retry = -1 if any(p[1] == -1 for p in per) else max(p[1] for p in per)
    return [int(fits), per[b][3], per[b][0], retry, per[b][4], b], {**logs, **after}


def model_refund(scores: List[int], n: int, at: Optional[float]) -> Tuple[int, List[int]]:
    """REFUND's steps: (members removed, scores left); the n newest scored <= at go."""
    eligible = [i for i, s in enumerate(scores) if at is None or s <= at]
    gone = set(eligible[-n:]) if eligible else set()
    return len(gone), [s for i, s in enumerate(scores) if i not in gone]


def outcome(fn):
    """A reply or the error text, so that errors compare too."""
    try:
        return list(fn())
    except redis.ResponseError as e:
        return f"error: {e}"


def scores(c: redis.Redis, key: str) -> List[float]:
    return [s for _, s in c.zrange(key, 0, -1, withscores=True)]


def server_ms(c: redis.Redis) -> int:
    secs, micros = c.time()
    return secs * 1000 + micros // 1000


def extended(expiry: Tuple[int, int], fresh: bool, before: int, after: int, ttl: int) -> Tuple[int, int]:
    """The bounds of a key's expiry after an admission made between the server-clock readings
    `before` and `after` that computes `ttl` ms (the contract's "Expiry"): the later of the key's
    expiry and the call's own; a key that held no member before the call (`fresh`) takes its own."""
    lo, hi = before + ttl, after + ttl
    return (lo, hi) if fresh else (max(expiry[0], lo), max(expiry[1], hi))


def run(server, sc: Scenario, with_module: bool) -> None:
    """Drives the script's key against the model and, `with_module`, the module's and the mixed key too."""
    c = server.client()
    module, lua = SlidingWindow(c, use="module"), SlidingWindow(c, use="lua")
    rng = random.Random(sc.seed)
    names = ("module", "lua", "mixed") if with_module else ("lua",)
    keys = {k: f"{sc.name}:{k}:{with_module}:{{{sc.seed}}}" for k in names}
    modelled: List[int] = []
    now = START
    expiry = (0, 0)
    admitted = 0
    for step in range(sc.steps):
        limits = draw_limits(rng, sc)
        wmax = max(w for w, _ in limits) * 1000
        dice = rng.randrange(1000)
        if dice < sc.back:
            now -= rng.randint(0, wmax)
        elif dice < sc.back + sc.jump:
            now += rng.randint(1, 3) * wmax + rng.randint(-1, 1)
        else:
            now += rng.randint(0, sc.stride)
        smallest = min(m for _, m in limits)
        cost = 1
        roll = rng.randrange(100)
        if roll < 10:
            cost = rng.randint(2, 4)
        elif roll < 13:
            cost = smallest + 1
        command = "peek" if rng.randrange(100) < 30 else "allow"
        args = [limits[0][0], limits[0][1], now] + (["COST", cost] if cost != 1 else [])
        for w, m in limits[1:]:
            args += ["LIMIT", w, m]
        what = f"{sc.name} step {step}: {command} {args}"

        # Drawn before the calls so that both runs of a scenario see the same stream.
        mixed = rng.choice((module, lua))
        before = server_ms(c)
        got = {"lua": outcome(lambda: lua.call(command, keys["lua"], args))}
        if with_module:
            got["module"] = outcome(lambda: module.call(command, keys["module"], args))
            got["mixed"] = outcome(lambda: mixed.call(command, keys["mixed"], args))
        after = server_ms(c)
        fresh = all(s <= now - wmax for s in modelled)
        want, after_scores = model(modelled, limits, now, cost, len(limits) > 1)
        if command == "allow":
            modelled = after_scores
        assert got["lua"] == want, f"{what}: script vs model"
        assert scores(c, keys["lua"]) == modelled, f"{what}: script vs model"
        for name in names:
            assert got[name] == got["lua"], f"{what}: {name} vs script"
            assert scores(c, keys[name]) == modelled, f"{what}: {name} scores"
        if command == "allow" and isinstance(want, list) and want[0] == 1:
            admitted += 1
            expiry = extended(expiry, fresh, before, after, wmax)
        for name, key in keys.items():
            at = c.pexpiretime(key)
            if c.exists(key):
                assert expiry[0] <= at <= expiry[1], f"{what}: {name} expires at {at}, not in {expiry}"
            else:
                assert at == -2, what
    assert 0 < admitted < sc.steps, f"{sc.name}: {admitted} admitted"
    for key in keys.values():
        for member, score in c.zrange(key, 0, -1, withscores=True):
            text = member.decode()
            assert len(text) == 26 and set(text) <= set(CROCKFORD), text
            ms = 0
            for ch in text[:10]:
                ms = ms * 32 + CROCKFORD.index(ch)
            assert ms == int(score) % (1 << 48), text


@pytest.mark.parametrize("sc", SINGLE + MULTI, ids=lambda s: s.name)
def test_script_follows_the_model(plain_server, sc):
    run(plain_server, sc, with_module=False)


@pytest.mark.parametrize("sc", SINGLE, ids=lambda s: s.name)
def test_script_equals_module_with_one_limit(module_server, sc):
    run(module_server, sc, with_module=True)


@pytest.mark.parametrize("sc", MULTI, ids=lambda s: s.name)
def test_script_equals_module_with_several_limits(module_server, sc):
    run(module_server, sc, with_module=True)


TOKENS = ["", "0", "1", "01", "7", "-1", "+1", "1.5", "1e3", "inf", "nan", "*", " 1", "x",
          "9007199254740", "9007199254741", "9007199254740992", "9007199254740993",
          "99999999999999999999999", "COST", "cost", "FOO", b"\x00\xff", "Z" * 70]
LIMIT_TOKENS = TOKENS + ["LIMIT", "limit", "LiMiT"]
OPTION_TOKENS = LIMIT_TOKENS + ["LEASE", "lease", "PRECISION", "Precision", "1000", "DETAIL", "Detail", "9007199254740000"]


@pytest.mark.parametrize("pool", [TOKENS, LIMIT_TOKENS, OPTION_TOKENS], ids=["options", "with-limit", "with-lease-detail"])
def test_same_answer_to_any_arguments(module_server, pool):
    """Malformed and odd argument lists: the same reply or the same error text, byte for byte."""
    c = module_server.client()
    module, lua = SlidingWindow(c, use="module"), SlidingWindow(c, use="lua")
    rng = random.Random(len(pool))
    errors = 0
    for i in range(3000):
        args = [rng.choice(pool) for _ in range(rng.randint(0, 11))]
        # Mostly valid heads, so that the options get parsed too.
        if rng.randrange(3):
            args[:3] = [rng.randint(1, 100), rng.randint(1, 10), START + i]
        command = rng.choice(("allow", "peek"))
        want = outcome(lambda: module.call(command, f"junk:m{i}", args))
        got = outcome(lambda: lua.call(command, f"junk:l{i}", args))
        assert got == want, f"{command} {args!r}"
        assert scores(c, f"junk:l{i}") == scores(c, f"junk:m{i}"), f"{command} {args!r}"
        errors += isinstance(want, str)
    assert 0 < errors < 3000


# Several keys (ALLOWALL, PEEKALL) and REFUND: the same three-way comparison and the same model.


@dataclass
class KeysScenario(Stream):
    #: Keys in the pool; each call takes 1..most_keys of them in a random order, each with
    #: 1..most_limits limits (one of them at least 60 s, so no key really expires).
    pool: int
    most_keys: int
    most_limits: int
    #: Per cent of steps that are a REFUND (with AT or without), and that are a PEEKALL.
    refunds: int
    peeks: int


KEYS_SCENARIOS = [
    KeysScenario("tenant", 21, 500, (1, 60), (2, 3, 6), 10, 30, 300, 3, 2, 2, 20, 20),
    KeysScenario("wide", 22, 300, (1, 5, 60, 120), (1, 3, 8, 12), 40, 20, 2_000, 6, 6, 4, 25, 20),
    KeysScenario("refunds", 23, 400, (60,), (3, 5), 150, 20, 5_000, 2, 2, 2, 45, 10),
]


def run_keys(server, sc: KeysScenario, with_module: bool) -> None:
    c = server.client()
    module, lua = SlidingWindow(c, use="module"), SlidingWindow(c, use="lua")
    rng = random.Random(sc.seed)
    names = ("module", "lua", "mixed") if with_module else ("lua",)
    # One hash tag for the whole scenario, as a cluster would need.
    keys = {p: [f"{sc.name}:{p}:{with_module}:{k}:{{{sc.seed}}}" for k in range(sc.pool)] for p in names}
    logs: Dict[int, List[int]] = {k: [] for k in range(sc.pool)}
    expiry: Dict[int, Tuple[int, int]] = {}
    now = START
    admitted = refunded = 0
    for step in range(sc.steps):
        dice = rng.randrange(1000)
        if dice < sc.back:
            now -= rng.randint(0, 60_000)
        elif dice < sc.back + sc.jump:
            now += rng.randint(60_000, 180_000) + rng.randint(-1, 1)
        else:
            now += rng.randint(0, sc.stride)
        mixed = rng.choice((module, lua))
        roll = rng.randrange(100)
        if roll < sc.refunds:
            k = rng.randrange(sc.pool)
            n = rng.choice((1, 1, 2, 3, 10))
            at = rng.choice((None, now, now, now - rng.randint(0, 5_000), "*"))
            args = [n] + ([] if at is None else ["AT", at])
            what = f"{sc.name} step {step}: refund key {k} {args}"
            got = {"lua": outcome(lambda: [lua.call("refund", keys["lua"][k], args)])}
            if with_module:
                got["module"] = outcome(lambda: [module.call("refund", keys["module"][k], args)])
                got["mixed"] = outcome(lambda: [mixed.call("refund", keys["mixed"][k], args)])
            removed, logs[k] = model_refund(logs[k], n, None if at in (None, "*") else at)
            want: Any = [removed]
            refunded += removed
            command = "refund"
        else:
            command = "peekall" if roll < sc.refunds + sc.peeks else "allowall"
            chosen = rng.sample(range(sc.pool), rng.randint(1, sc.most_keys))
            limits = []
            for keyno, k in enumerate(chosen, 1):
                mine = [(rng.choice(sc.windows), rng.choice(sc.maxes)) for _ in range(rng.randint(1, sc.most_limits))]
                if max(w for w, _ in mine) < 60:
                    mine[0] = (60, mine[0][1])
                limits += [(keyno, k, w, m) for w, m in mine]
            rng.shuffle(limits)
            smallest = min(m for *_, m in limits)
            cost = rng.choice((1, 1, 1, 1, 1, 1, 2, 3, smallest + 1))
            args_of = lambda p: (
                [len(chosen), *(keys[p][k] for k in chosen), now]
                + (["COST", cost] if cost != 1 else [])
                + [word for keyno, _, w, m in limits for word in ("LIMIT", keyno, w, m)]
            )
            what = f"{sc.name} step {step}: {command} {args_of('lua')}"
            before = server_ms(c)
            got = {"lua": outcome(lambda: lua.call_keys(command, args_of("lua")))}
            if with_module:
                got["module"] = outcome(lambda: module.call_keys(command, args_of("module")))
                got["mixed"] = outcome(lambda: mixed.call_keys(command, args_of("mixed")))
            after = server_ms(c)
            wmax_of = {k: max(w for _, kk, w, _ in limits if kk == k) * 1000 for k in chosen}
            fresh = {k: all(s <= now - wmax_of[k] for s in logs[k]) for k in chosen}
            want, after_logs = model_keys(logs, [(k, w, m) for _, k, w, m in limits], now, cost)
            if command == "allowall":
                logs = after_logs
                if isinstance(want, list) and want[0] == 1:
                    admitted += 1
                    for k in chosen:
                        expiry[k] = extended(expiry.get(k, (0, 0)), fresh[k], before, after, wmax_of[k])
        assert got["lua"] == want, f"{what}: script vs model"
        for name in names:
            assert got[name] == want, f"{what}: {name} vs model"
            for k, key in enumerate(keys[name]):
                assert scores(c, key) == logs[k], f"{what}: {name} key {k} scores"
                at = c.pexpiretime(key)
                if logs[k]:
                    lo, hi = expiry[k]
                    assert lo <= at <= hi, f"{what}: {name} key {k} expires at {at}, not in [{lo}, {hi}]"
                else:
                    assert at == -2, f"{what}: {name} key {k} should not exist"
    assert 0 < admitted < sc.steps and refunded > 0, f"{sc.name}: {admitted} admitted, {refunded} refunded"


@pytest.mark.parametrize("with_module", [False, True], ids=["follows_the_model", "equals_module"])
@pytest.mark.parametrize("sc", KEYS_SCENARIOS, ids=lambda s: s.name)
def test_script_over_several_keys(request, sc, with_module):
    """The script against the model on a server without the module, and against the module."""
    server = request.getfixturevalue("module_server" if with_module else "plain_server")
    run_keys(server, sc, with_module=with_module)


KEYS_TOKENS = ["", "0", "1", "2", "3", "17", "-1", "1.5", "inf", "*", "x", "9007199254740993",
               "COST", "cost", "LIMIT", "limit", "AT", "at", "FOO", b"\x00\xff", "k1", "k2",
               "LEASE", "lease", "PRECISION", "precision", "1000", "DETAIL", "detail"]


@pytest.mark.parametrize("command", ["allowall", "peekall", "refund"])
def test_same_answer_to_any_arguments_of_the_new_commands(module_server, command):
    """ALLOWALL, PEEKALL and REFUND given odd argument lists: the same reply or the same error text."""
    c = module_server.client()
    module, lua = SlidingWindow(c, use="module"), SlidingWindow(c, use="lua")
    rng = random.Random(command)
    errors = 0
    for i in range(2000):
        args: List[Any] = [rng.choice(KEYS_TOKENS) for _ in range(rng.randint(0, 12))]
        # Mostly valid heads, so that the options get parsed too.
        if command == "refund":
            if rng.randrange(3):
                args[:1] = [rng.randint(1, 3)]
            prefix = lambda p: (lambda: [(module if p == "m" else lua).call(command, f"junk:{{{i}}}:{p}", args)])
        else:
            if rng.randrange(3):
                numkeys = rng.randint(1, 3)
                head = [numkeys, *(f"k{j}" for j in range(1, numkeys + 1)), START + i]
                if rng.randrange(2):
                    head += [w for j in range(1, numkeys + 1) for w in ("LIMIT", j, 60, 5)]
                args[:0] = head
            prefix = lambda p: (lambda: (module if p == "m" else lua).call_keys(
                command, [f"junk:{{{i}}}:{p}:{a}" if a in ("k1", "k2", "k3") else a for a in args]))
        for p in ("m", "l"):
            for k in ("", ":k1", ":k2"):
                c.zadd(f"junk:{{{i}}}:{p}{k}", {"a": START + i - 1, "b": START + i - 2})
        # Error texts may quote a key: each side's keys are named alike there.
        plain = lambda got, p: got.replace(f"junk:{{{i}}}:{p}", "KEY") if isinstance(got, str) else got
        want = plain(outcome(prefix("m")), "m")
        got = plain(outcome(prefix("l")), "l")
        assert got == want, f"{command} {args!r}"
        for k in ("", ":k1", ":k2", ":k3"):
            assert scores(c, f"junk:{{{i}}}:l{k}") == scores(c, f"junk:{{{i}}}:m{k}"), f"{command} {args!r}"
        errors += isinstance(want, str)
    assert 0 < errors < 2000


# LEASE, PRECISION, DETAIL and lateness: the module (with slidingwindow.lateness set) against the script (with
# the helper's lateness set alike), on twin keys of one hash tag: replies, error texts, scores and
# expiries must agree, over ALLOW, PEEK, ALLOWALL, PEEKALL and REFUND.


def run_options(server, seed: int, lateness: int, steps: int) -> None:
    c = server.client()
    c.config_set("slidingwindow.lateness", lateness)
    module, lua = SlidingWindow(c, use="module"), SlidingWindow(c, use="lua", lateness=lateness)
    rng = random.Random(seed)
    keys = {p: [f"opt:{seed}:{p}:{k}:{{{seed}}}" for k in range(3)] for p in ("m", "l")}
    slack: Dict[int, int] = {}
    now = START
    seen = {"lease": 0, "precision": 0, "detail": 0, "admitted": 0}
    try:
        for step in range(steps):
            dice = rng.randrange(100)
            if dice < 10:
                now -= rng.randint(0, lateness + 2_000)  # behind, often within the lateness
            elif dice < 13:
                now += rng.randint(60_000, 200_000)
            else:
                now += rng.randint(0, 700)
            groups: List[List[Any]] = []
            if rng.randrange(3) == 0:
                groups.append([rng.choice(("LEASE", "lease")), rng.choice((1, 250, 1_000, 60_000))])
                seen["lease"] += 1
            if rng.randrange(3) == 0:
                groups.append([rng.choice(("PRECISION", "precision")), rng.choice((1, 7, 1_000, 60_000))])
                seen["precision"] += 1
            if rng.randrange(2) == 0:
                groups.append([rng.choice(("DETAIL", "detail"))])
                seen["detail"] += 1
            rng.shuffle(groups)
            extra = [w for g in groups for w in g]
            roll = rng.randrange(100)
            if roll < 15:
                k = rng.randrange(3)
                args = [rng.choice((1, 2, 5))] + rng.choice(([], ["AT", now], ["AT", now + 60_000], ["AT", "*"]))
                command, touched = "refund", [k]
                send = lambda sw, p: [sw.call("refund", keys[p][k], args)]
            elif roll < 55:
                k = rng.randrange(3)
                limits = [(rng.choice((1, 2, 60)), rng.choice((2, 4, 8))) for _ in range(rng.randint(1, 3))]
                limits[0] = (60, limits[0][1]) if max(w for w, _ in limits) < 60 else limits[0]
                args = [limits[0][0], limits[0][1], now, "COST", rng.choice((1, 1, 1, 2, 3))]
                for w, m in limits[1:]:
                    args += ["LIMIT", w, m]
                args += extra
                command, touched = rng.choice(("allow", "allow", "peek")), [k]
                send = lambda sw, p: sw.call(command, keys[p][k], args)
            else:
                chosen = rng.sample(range(3), rng.randint(1, 3))
                lims = []
                for keyno in range(1, len(chosen) + 1):
                    lims += [("LIMIT", keyno, 60, rng.choice((3, 6, 9)))] + (
                        [("LIMIT", keyno, rng.choice((1, 2)), rng.choice((2, 4)))] if rng.randrange(2) else [])
                command, touched = rng.choice(("allowall", "allowall", "peekall")), chosen
                tail = [now, "COST", rng.choice((1, 1, 2))] + [w for l in lims for w in l] + extra
                send = lambda sw, p: sw.call_keys(command, [len(chosen), *(keys[p][k] for k in chosen), *tail])
            what = f"seed {seed} step {step}: {command} {touched} {extra}"
            before = server_ms(c)
            got_m = outcome(lambda: send(module, "m"))
            got_l = outcome(lambda: send(lua, "l"))
            after = server_ms(c)
            assert got_l == got_m, what
            if command in ("allow", "allowall") and isinstance(got_m, list) and got_m[0] == 1:
                seen["admitted"] += 1
                # Each side keeps the later of its expiries: they differ by at most the widest
                # bracket of the admissions since the key was made.
                for k in touched:
                    slack[k] = max(slack.get(k, 0), after - before)
            for k in range(3):
                assert scores(c, keys["l"][k]) == scores(c, keys["m"][k]), f"{what}: key {k}"
                at_m, at_l = c.pexpiretime(keys["m"][k]), c.pexpiretime(keys["l"][k])
                if at_m < 0 or at_l < 0:
                    assert at_m == at_l, f"{what}: key {k} expiry {at_m} vs {at_l}"
                    slack.pop(k, None)
                else:
                    assert abs(at_m - at_l) <= slack[k], f"{what}: key {k} expires at {at_m} and {at_l}"
    finally:
        c.config_set("slidingwindow.lateness", 0)
    assert min(seen.values()) > 0, seen


@pytest.mark.parametrize("lateness", [0, 20_000, 86_400_000])
def test_script_equals_module_with_lease_precision_detail_and_lateness(module_server, lateness):
    run_options(module_server, 31 + lateness % 97, lateness, 400)
