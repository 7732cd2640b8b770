"""What the helpers send and how they read the answers, without any I/O: the arguments of each
call, which path (module or script) takes it, the replies typed, and what a failure means.

The calls are generators ("steps"): each yields a ``Request`` (a command's words and how long
its reply may take) and is sent that reply, or has the ``redis.ResponseError`` it raised thrown
in; its return value is the call's answer. The synchronous helper (``slidingwindow.SlidingWindow``)
and the asyncio one (``slidingwindow.asyncio.SlidingWindow``) each run the same steps on their
own connections (``drive``, and its asyncio twin).
"""

from __future__ import annotations

import dataclasses
import hashlib
import secrets
from importlib import resources
from typing import (Any, Callable, Dict, Generator, Iterable, List, Mapping, NamedTuple, Optional, Sequence, Tuple,
                    TypeVar, Union)

import redis

from .results import AllResult, Key, Limit, Result, SlidingWindowError, TopEntry, UnavailableError

CROCKFORD = "0123456789ABCDEFGHJKMNPQRSTVWXYZ"

#: The Lua rendering of the contract (clients/lua/slidingwindow.lua in the repository).
SCRIPT: str = resources.files("slidingwindow").joinpath("slidingwindow.lua").read_text(encoding="utf-8")
SCRIPT_SHA = hashlib.sha1(SCRIPT.encode()).hexdigest()

LimitLike = Union[Limit, Tuple[int, int]]
Limits = Union[LimitLike, Iterable[LimitLike]]
#: ALLOWALL's keys with their limits: a mapping ``{key: limits}`` or ``(key, limits)`` pairs, in order.
KeyedLimits = Union[Mapping[Key, Limits], Iterable[Tuple[Key, Limits]]]
#: A call's ``(lease, precision)``: where its admitted members are logged.
Times = Tuple[Optional[int], Optional[int]]

MAX_LATENESS = 86_400_000
#: 2^53, the largest time (ms) and count the commands take.
MAX_EXACT = 1 << 53

# Error replies about the server's state rather than the call: the call may succeed elsewhere or
# later, so they are the on_error policy's, not the caller's. redis-py parses some into classes
# (and drops their code from the text); the others keep their code as the first word.
_STATE_CLASSES = tuple(
    getattr(redis.exceptions, name)
    for name in ("ReadOnlyError", "OutOfMemoryError", "BusyLoadingError", "MasterDownError", "TryAgainError", "ClusterDownError")
    if hasattr(redis.exceptions, name)
)
_STATE_CODES = ("READONLY", "OOM", "LOADING", "MASTERDOWN", "TRYAGAIN", "CLUSTERDOWN", "BUSY", "MISCONF", "NOREPLICAS")
# A cluster's redirections: the slot map is reloaded and the call sent once more.
_REDIRECTS = tuple(getattr(redis.exceptions, name) for name in ("MovedError", "AskError") if hasattr(redis.exceptions, name))

T = TypeVar("T")


class Request(NamedTuple):
    """One command to send, and the seconds its reply may take (None: the connection's timeout)."""

    words: Tuple[Any, ...]
    timeout: Optional[float] = None


#: A call as steps: yields requests, is sent their replies, returns the answer.
Steps = Generator[Request, Any, T]


def resume(steps: Generator[Any, Any, T], reply: Any, error: Optional[Exception]) -> Tuple[bool, Any]:
    """Sends ``steps`` the reply to what they yielded last (None to start), or throws in its
    exception: ``(True, answer)`` when they are done, else ``(False, what they yield next)``."""
    try:
        return False, (steps.send(reply) if error is None else steps.throw(error))
    except StopIteration as done:
        return True, done.value


def invoke(helper: Any, call: Tuple[str, Tuple[Any, ...], Dict[str, Any]]) -> Any:
    """A call that steps above the commands yield (a lease's, a slot's): ``(method, args,
    kwargs)`` of ``helper``; the asyncio helper's answer is an awaitable."""
    name, args, kwargs = call
    return getattr(helper, name)(*args, **kwargs)


def drive(steps: Generator[Any, Any, T], execute: Callable[[Any], Any]) -> T:
    """Runs ``steps`` to their answer: each thing they yield goes to ``execute``, whose result is
    sent back, or whose exception is thrown in (the steps catch what they expect)."""
    done, value = resume(steps, None, None)
    while not done:
        try:
            reply, error = execute(value), None
        except Exception as e:
            reply, error = None, e
        done, value = resume(steps, reply, error)
    return value


def unavailable(e: BaseException) -> bool:
    """Whether a failure means Redis did not decide (rather than refusing the call's arguments)."""
    if isinstance(e, (redis.ConnectionError, redis.TimeoutError, OSError)):
        return True
    if isinstance(e, redis.ResponseError):
        text = str(e)
        return isinstance(e, _STATE_CLASSES) or text.split(" ", 1)[0] in _STATE_CODES
    return False


class Plan(NamedTuple):
    """One typed call: the command, its keys, its words on the module path (``argv``) and on the
    script's (``rest``), what an admission charged (for ``confirm``'s refund), and how to type
    the reply, or answer when Redis did not decide (``on_error="open"``)."""

    command: str
    keys: List[Any]
    argv: List[Any]
    rest: List[Any]
    cost: int
    times: Times
    detail: bool
    typed: Callable[[Sequence], Any]
    fallback: Any


class Core:
    """The settings and the steps both helpers share; see ``slidingwindow.SlidingWindow``. The
    client is a redis-py client, synchronous or asyncio (a cluster's has ``get_node_from_key``)."""

    def __init__(
        self,
        client: Any,
        use: str = "auto",
        *,
        lateness: int = 0,
        timeout: Optional[float] = 1.0,
        on_error: str = "closed",
        confirm: Optional[Tuple[int, int]] = None,
        on_unconfirmed: str = "deny",
    ) -> None:
        if use not in ("auto", "module", "lua"):
            raise ValueError("use must be 'auto', 'module' or 'lua'")
        if not (isinstance(lateness, int) and 0 <= lateness <= MAX_LATENESS):
            raise ValueError(f"lateness must be an integer between 0 and {MAX_LATENESS} (ms)")
        if timeout is not None and not timeout > 0:
            raise ValueError("timeout must be a positive number of seconds, or None")
        if on_error not in ("open", "closed"):
            raise ValueError("on_error must be 'open' or 'closed'")
        if on_unconfirmed not in ("allow", "deny"):
            raise ValueError("on_unconfirmed must be 'allow' or 'deny'")
        cluster = self._cluster = hasattr(client, "get_node_from_key")
        if confirm is not None:
            replicas, wait_ms = confirm
            if not (isinstance(replicas, int) and replicas >= 1 and isinstance(wait_ms, int) and wait_ms >= 0):
                raise ValueError("confirm must be (replicas >= 1, timeout_ms >= 0)")
            if cluster:
                raise ValueError("confirm needs one master (redis.Redis or a Sentinel's master_for), not a cluster")
        self._module: Optional[bool] = None if use == "auto" else use == "module"
        self._auto = use == "auto"
        self._script_word = "" if lateness == 0 else f" lateness {lateness}"
        self.timeout = timeout
        self.on_error = on_error
        self.confirm = confirm
        self.on_unconfirmed = on_unconfirmed
        self._client = client
        self._pools: Dict[Any, Any] = {}  # the helper's own connections, by node

    # The calls' plans.

    def _plan(self, command: str, key: Key, limits: Limits, cost: int, now: Optional[int], times: Times,
              detail: bool) -> Plan:
        """``allow`` or ``peek``."""
        confirming = command == "allow" and self.confirm is not None
        args = arguments(limits, cost, now, lease=times[0], precision=times[1], detail=detail or confirming)
        return Plan(command, [key], [key, *args], args, cost, times, detail, Result.from_reply, Result(True, 0, 0, 0, 0, 0))

    def _plan_all(self, command: str, limits: KeyedLimits, cost: int, now: Optional[int], times: Times,
                  detail: bool) -> Plan:
        """``allowall`` or ``peekall``."""
        pairs = keyed_pairs(limits)
        keys = [key for key, _ in pairs]
        named = [(key, l) for key, listed in pairs for l in limit_list(listed)]
        args: List[Any] = [len(keys), *keys, "*" if now is None else now]
        if cost != 1:
            args += ["COST", cost]
        for keyno, (key, listed) in enumerate(pairs, 1):
            for l in limit_list(listed):
                args += ["LIMIT", keyno, l.window, l.max]
        args += options(*times, detail or (command == "allowall" and self.confirm is not None))

        def typed(reply: Sequence) -> AllResult:
            base = Result.from_reply(reply)
            key, limit = named[base.limit]
            return AllResult(**{f.name: getattr(base, f.name) for f in dataclasses.fields(Result)},
                             binding_key=key, binding_limit=limit)

        fallback = AllResult(True, 0, 0, 0, 0, 0, keys[0], named[0][1])
        rest = [len(keys), *args[len(keys) + 1:]]
        return Plan(command, keys, args, rest, cost, times, detail, typed, fallback)

    def _failed(self, plan: Plan, e: UnavailableError) -> Any:
        """The on_error policy: raise, or answer the plan's admitted fallback holding the failure."""
        if self.on_error == "closed":
            raise e
        return dataclasses.replace(plan.fallback, error=e)

    def _failure(self, e: Exception, attempt: int) -> Optional[Exception]:
        """What a failed call raises (its cause chained): the call's own error as it is, an
        ``UnavailableError`` when Redis did not decide; None for a cluster's first redirection
        (reload the slot map and try once more)."""
        if isinstance(e, redis.ResponseError):
            if self._cluster and attempt == 0 and isinstance(e, _REDIRECTS):
                return None
            return UnavailableError(f"Redis did not decide: {e}") if unavailable(e) else e
        if isinstance(e, (redis.ConnectionError, redis.TimeoutError, OSError)):
            return UnavailableError(f"Redis did not decide: {type(e).__name__}: {e}")
        return e

    # The steps.

    def _exchange(self, plan: Plan) -> Steps[Any]:
        """The command, then with ``confirm`` the WAIT (and the refund it may need)."""
        result: Any = plan.typed((yield from self._command(plan.command, plan.keys, plan.argv, plan.rest)))
        if self.confirm is not None and plan.command in ("allow", "allowall") and result.allowed:
            result = yield from self._confirmed(plan, result)
        if not plan.detail and result.states is not None:
            result = dataclasses.replace(result, states=None, now=None)
        return result

    def _confirmed(self, plan: Plan, result: Any) -> Steps[Any]:
        replicas, wait_ms = self.confirm  # type: ignore[misc]
        wait_s = None if self.timeout is None else self.timeout + wait_ms / 1000
        acked = int((yield Request(("WAIT", replicas, wait_ms), wait_s)))
        if acked >= replicas:
            return dataclasses.replace(result, confirmed=True)
        if self.on_unconfirmed == "allow":
            return dataclasses.replace(result, confirmed=False)
        # Taken back exactly: this call's members, at the score they were logged with.
        at = score(result.now, *plan.times)
        for key in plan.keys:
            yield from self._command("refund", [key], [key, plan.cost, "AT", at], [plan.cost, "AT", at])
        return dataclasses.replace(result, allowed=False, confirmed=False)

    def _detect(self) -> Steps[bool]:
        if self._module is None:
            info = yield Request(("COMMAND", "INFO", "slidingwindow.allow"))
            # One entry per name asked: nil for an unknown command, its description otherwise.
            self._module = any(v for v in (info.values() if isinstance(info, dict) else info or []))
        return self._module

    def _command(self, command: str, keys: List[Any], argv: List[Any], rest: List[Any]) -> Steps[Any]:
        if (yield from self._detect()):
            try:
                return (yield Request((f"SLIDINGWINDOW.{command.upper()}", *argv)))
            except redis.ResponseError as e:
                # The module was unloaded (or this is a new server behind the same address).
                if not self._auto or not str(e).lower().startswith("unknown command"):
                    raise
                self._module = False
        entropy = "".join(secrets.choice(CROCKFORD) for _ in range(16))
        script_args = [len(keys), *keys, command.lower() + self._script_word, entropy, *rest]
        try:
            return (yield Request(("EVALSHA", SCRIPT_SHA, *script_args)))
        except redis.exceptions.NoScriptError:
            return (yield Request(("EVAL", SCRIPT, *script_args)))

    def _raw(self, command: str, key: Key, args: Sequence[Any]) -> Steps[Any]:
        """``call``'s steps."""
        return self._command(command, [key], [key, *args], list(args))

    def _raw_keys(self, command: str, args: Sequence[Any]) -> Tuple[Optional[Any], Callable[[], Steps[Any]]]:
        """``call_keys``: the key that names the node, and the steps."""
        keys, rest = split_keys(args)
        return (keys[0] if keys else None), lambda: self._command(command, keys, list(args), rest)

    def _top_of_node(self, count: int) -> Steps[Any]:
        """``SLIDINGWINDOW.TOP COUNT count`` on one master."""
        if not (yield from self._detect()):
            raise SlidingWindowError("top needs the module: the Lua script keeps no summary of refusals")
        return (yield Request(("SLIDINGWINDOW.TOP", "COUNT", count)))


def refund_args(n: int, at: Union[int, str, None]) -> List[Any]:
    """``n [AT at]``."""
    return [n] + ([] if at is None else ["AT", at])


def top_count(count: Any) -> int:
    if not (isinstance(count, int) and not isinstance(count, bool) and count >= 1):
        raise ValueError("count must be an integer >= 1")
    return count


def top_entries(replies: Iterable[Any], count: int) -> List[TopEntry]:
    """The masters' TOP replies as one list: a key's counts and errors added up, most refused
    first (ties: the smaller error, then the key's bytes), at most ``count``."""
    totals: Dict[bytes, List[int]] = {}
    for reply in replies:
        for key, refused, error in reply:
            total = totals.setdefault(bytes(key), [0, 0])
            total[0] += int(refused)
            total[1] += int(error)
    entries = [TopEntry(key, refused, error) for key, (refused, error) in totals.items()]
    entries.sort(key=lambda e: (-e.refused, e.error, e.key))
    return entries[:count]


def options(lease: Optional[int], precision: Optional[int], detail: bool) -> List[Any]:
    """``[LEASE ms] [PRECISION p] [DETAIL]``; a precision the commands cannot take raises ValueError."""
    if precision is not None and not (type(precision) is int and 1 <= precision <= MAX_EXACT):
        raise ValueError(f"precision must be an integer between 1 and {MAX_EXACT} (ms), not {precision!r}")
    return (([] if lease is None else ["LEASE", lease]) + ([] if precision is None else ["PRECISION", precision])
            + (["DETAIL"] if detail else []))


def score(now: int, lease: Optional[int], precision: Optional[int]) -> int:
    """The score an admitted call's members were logged at: ``now + ms`` rounded up to a multiple
    of the precision (what ``REFUND key n AT score`` takes back)."""
    s = now + (lease or 0)
    p = precision or 1
    return -(-s // p) * p


def arguments(limits: Limits, cost: int, now: Optional[int], *, lease: Optional[int] = None,
              precision: Optional[int] = None, detail: bool = False) -> List[Any]:
    """``window max now [COST n] [LIMIT window max]... [LEASE ms] [PRECISION p] [DETAIL]`` for a
    list of limits (the first is positional)."""
    first, *rest = limit_list(limits)
    args: List[Any] = [first.window, first.max, "*" if now is None else now]
    if cost != 1:
        args += ["COST", cost]
    for l in rest:
        args += ["LIMIT", l.window, l.max]
    return args + options(lease, precision, detail)


def limit_list(limits: Limits) -> List[Limit]:
    """One limit or several, as a list of ``Limit``."""
    if isinstance(limits, tuple) and len(limits) == 2 and not isinstance(limits[0], tuple):
        limits = [limits]  # type: ignore[list-item]
    listed = [Limit(*l) for l in limits]  # type: ignore[union-attr]
    if not listed:
        raise ValueError("at least one limit is needed")
    return listed


def keyed_pairs(limits: KeyedLimits) -> List[Tuple[Key, Limits]]:
    pairs = list(limits.items()) if isinstance(limits, Mapping) else list(limits)
    if not pairs:
        raise ValueError("at least one key is needed")
    return pairs


def split_keys(args: Sequence[Any]) -> Tuple[List[Any], List[Any]]:
    """ALLOWALL's arguments as the script's KEYS and the rest: a call without ``numkeys`` keys and
    a ``now`` gets no keys, and the script answers the module's error."""
    numkeys = _count(args[0]) if args else None
    if numkeys is not None and 1 <= numkeys <= 16 and len(args) >= numkeys + 2:
        return list(args[1: numkeys + 1]), [args[0], *args[numkeys + 1:]]
    return [], list(args)


def _count(word: Any) -> Optional[int]:
    """``numkeys`` as the server would read it (plain decimal digits), or None."""
    text = word.decode("latin-1") if isinstance(word, bytes) else str(word)
    return int(text) if text.isascii() and text.isdigit() and len(text) < 20 else None
