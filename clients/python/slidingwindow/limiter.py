"""SlidingWindow: the calls, on the module or on the Lua script, and what happens on a bad day."""

from __future__ import annotations

import dataclasses
import hashlib
import secrets
from importlib import resources
from typing import Any, Callable, Dict, Iterable, List, Mapping, Optional, Sequence, Tuple, TypeVar, Union

import redis

from .connections import Connections, read_within
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


def unavailable(e: BaseException) -> bool:
    """Whether a failure means Redis did not decide (rather than refusing the call's arguments)."""
    if isinstance(e, (redis.ConnectionError, redis.TimeoutError, OSError)):
        return True
    if isinstance(e, redis.ResponseError):
        text = str(e)
        return isinstance(e, _STATE_CLASSES) or text.split(" ", 1)[0] in _STATE_CODES
    return False


class SlidingWindow:
    """Rate limits over one redis-py client (``redis.Redis``, a Sentinel's ``master_for(...)``, or
    ``redis.RedisCluster``). Safe to share between threads.

    - ``use="auto"`` asks the server once (``COMMAND INFO slidingwindow.allow``) whether the module
      is loaded and caches the answer; ``"module"`` or ``"lua"`` force a path (a forced module path
      never falls back to the script).
    - ``lateness``: the ms the Lua path passes as the script's ``lateness`` (the module path reads
      the server's ``slidingwindow.lateness``); keep it equal to the servers' when both paths serve
      the same keys.
    - ``timeout``: seconds a call waits to connect and for each reply (None: without bound); calls
      are made once, without redis-py's retries.
    - ``on_error``: when Redis does not decide (``UnavailableError``): ``"closed"`` raises it,
      ``"open"`` answers an admitted ``Result`` whose ``error`` holds it.
    - ``confirm=(replicas, timeout_ms)``: after each admitted ``allow`` / ``allow_all``, ``WAIT
      replicas timeout_ms`` on the same connection; when fewer replicas acknowledged,
      ``on_unconfirmed="deny"`` takes the charge back and answers refused, ``"allow"`` answers
      admitted; either way ``confirmed`` is False.
    """

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
        self._cluster = hasattr(client, "get_node_from_key")
        if confirm is not None:
            replicas, wait_ms = confirm
            if not (isinstance(replicas, int) and replicas >= 1 and isinstance(wait_ms, int) and wait_ms >= 0):
                raise ValueError("confirm must be (replicas >= 1, timeout_ms >= 0)")
            if self._cluster:
                raise ValueError("confirm needs one master (redis.Redis or a Sentinel's master_for), not a cluster")
        self._client = client
        self._module: Optional[bool] = None if use == "auto" else use == "module"
        self._auto = use == "auto"
        self._script_word = "" if lateness == 0 else f" lateness {lateness}"
        self.timeout = timeout
        self.on_error = on_error
        self.confirm = confirm
        self.on_unconfirmed = on_unconfirmed
        self._pools: Dict[Any, Connections] = {}

    # The typed calls.

    def allow(self, key: Key, limits: Limits, cost: int = 1, now: Optional[int] = None, *,
              lease: Optional[int] = None, precision: Optional[int] = None, detail: bool = False) -> Result:
        """Admits the request if it fits every limit (and logs it); ``now`` in Unix ms, None = the
        server's clock. ``lease=ms`` logs an admitted call's members at ``now + ms`` (see
        ``lease()``); ``precision=p`` logs them at that time rounded up to a multiple of ``p`` ms
        (a key then holds a bounded number of distinct times, whatever the rate);
        ``detail=True`` adds every limit's state and the ``now`` used."""
        args = arguments(limits, cost, now, lease=lease, precision=precision, detail=detail or self.confirm is not None)
        fallback = Result(True, 0, 0, 0, 0, 0)
        return self._decide("allow", [key], [key, *args], args, cost, (lease, precision), detail, Result.from_reply, fallback)

    def peek(self, key: Key, limits: Limits, cost: int = 1, now: Optional[int] = None, *,
             lease: Optional[int] = None, precision: Optional[int] = None, detail: bool = False) -> Result:
        """What ``allow`` would answer now, changing nothing."""
        args = arguments(limits, cost, now, lease=lease, precision=precision, detail=detail)
        fallback = Result(True, 0, 0, 0, 0, 0)
        return self._decide("peek", [key], [key, *args], args, cost, (lease, precision), detail, Result.from_reply, fallback)

    def allow_all(self, limits: KeyedLimits, cost: int = 1, now: Optional[int] = None, *,
                  lease: Optional[int] = None, precision: Optional[int] = None, detail: bool = False) -> AllResult:
        """Admits the request if it fits every limit of every key, and then logs it on every key
        (all or nothing, one atomic call). ``limits``: ``{key: limits}`` or ``(key, limits)`` pairs."""
        return self._all("allowall", limits, cost, now, (lease, precision), detail)

    def peek_all(self, limits: KeyedLimits, cost: int = 1, now: Optional[int] = None, *,
                 lease: Optional[int] = None, precision: Optional[int] = None, detail: bool = False) -> AllResult:
        """What ``allow_all`` would answer now, changing nothing."""
        return self._all("peekall", limits, cost, now, (lease, precision), detail)

    def refund(self, key: Key, n: int = 1, at: Union[int, str, None] = None) -> int:
        """Takes back up to ``n`` logged requests (the newest scored at or before ``at``: pass the
        ``now`` the request was admitted with; None: the newest whatever their score, ``"*"``: the
        server's clock). Answers how many were removed; raises ``UnavailableError`` when Redis
        does not answer."""
        args: List[Any] = [n] + ([] if at is None else ["AT", at])
        return int(self.call("refund", key, args))

    def lease(self, key: Key, limits: Limits, size: int, duration_ms: int,
              clock: Optional[Callable[[], int]] = None) -> "Lease":
        """A ``Lease``: permits for one key and its limits, taken ``size`` at a time for
        ``duration_ms`` and handed out from memory. ``clock``: None for the server's clock (``*``),
        or a callable returning Unix ms that every call of the lease passes as its ``now`` and
        that the lease times itself by (see ``Lease``)."""
        from .lease import Lease

        return Lease(self, key, limits, size, duration_ms, clock=clock)

    def acquire(self, key: Key, limit: int, hold: int) -> "Slot":
        """A slot among ``limit`` in flight on ``key``, held at most ``hold`` seconds (the longest
        a request may take): ``with sw.acquire(key, 10, 30) as slot: if slot.allowed: ...``.
        Leaving the block releases it (``REFUND key 1 AT`` its score); a holder that dies frees it
        when ``hold`` passes. Never more than ``limit`` in flight."""
        from .inflight import acquire

        return acquire(self, key, limit, hold)

    def reserve(self, key: Key, limits: Limits, n: int) -> "Reservation":
        """``n`` requests charged now for a cost known only later (tokens of a response):
        ``settle(used)`` refunds what was not used or charges the excess (an overrun when it does
        not fit, reported, never hidden); ``cancel()`` refunds all."""
        from .inflight import reserve

        return reserve(self, key, limits, n)

    def top(self, count: int = 10) -> List[TopEntry]:
        """The keys refused most since the servers' last ``SLIDINGWINDOW.TOPRESET``, most first
        (ties: the smaller error, then the key's bytes), at most ``count`` (``SLIDINGWINDOW.TOP
        COUNT count``; at most the servers' ``slidingwindow.top-keys``). On a cluster every master
        is asked and a key's counts and errors are added up. Needs the module: the script keeps
        no summary, so on the script path it raises ``SlidingWindowError``."""
        if not (isinstance(count, int) and not isinstance(count, bool) and count >= 1):
            raise ValueError("count must be an integer >= 1")
        totals: Dict[bytes, List[int]] = {}
        masters = self._client.get_primaries() if self._cluster else [None]
        for node in masters:
            target = self._client if node is None else node.redis_connection

            def ask(conn: Any) -> Any:
                if not self._detect(conn):
                    raise SlidingWindowError("top needs the module: the Lua script keeps no summary of refusals")
                conn.send_command("SLIDINGWINDOW.TOP", "COUNT", count)
                return conn.read_response()

            for key, refused, error in self._run_on(target, ask):
                total = totals.setdefault(bytes(key), [0, 0])
                total[0] += int(refused)
                total[1] += int(error)
        entries = [TopEntry(key, refused, error) for key, (refused, error) in totals.items()]
        entries.sort(key=lambda e: (-e.refused, e.error, e.key))
        return entries[:count]

    @property
    def uses_module(self) -> bool:
        """Whether calls go to the module (else to the script); asks the server the first time."""
        return self._run(None, self._detect)

    # Raw replies.

    def call(self, command: str, key: Key, args: Sequence[Any]) -> Any:
        """The raw reply of SLIDINGWINDOW.<command> key args..., on whichever path is in use.
        Raises ``redis.ResponseError`` for the call's own errors, ``UnavailableError`` when Redis
        does not decide."""
        return self._run(key, lambda conn: self._command(conn, command, [key], [key, *args], list(args)))

    def call_keys(self, command: str, args: Sequence[Any]) -> Any:
        """The raw reply of SLIDINGWINDOW.ALLOWALL|PEEKALL numkeys key... rest..., on either path."""
        keys, rest = split_keys(args)
        return self._run(keys[0] if keys else None, lambda conn: self._command(conn, command, keys, list(args), rest))

    def close(self) -> None:
        """Closes the helper's own connections (the client's are left alone)."""
        for pool in list(self._pools.values()):
            pool.close()

    # Internals.

    def _all(self, command: str, limits: KeyedLimits, cost: int, now: Optional[int],
             times: Times, detail: bool) -> AllResult:
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
        return self._decide(command, keys, args, rest, cost, times, detail, typed, fallback)

    def _decide(self, command: str, keys: List[Any], argv: List[Any], rest: List[Any], cost: int,
                times: Times, detail: bool, typed: Callable[[Sequence], T], fallback: T) -> T:
        """One typed call: the command, then with ``confirm`` the WAIT (and the refund it may
        need) on the same connection; the on_error policy when Redis does not decide."""
        confirming = self.confirm is not None and command in ("allow", "allowall")

        def exchange(conn: Any) -> T:
            result: Any = typed(self._command(conn, command, keys, argv, rest))
            if confirming and result.allowed:
                result = self._confirmed(conn, keys, cost, times, result)
            if not detail and result.states is not None:
                result = dataclasses.replace(result, states=None, now=None)
            return result

        try:
            return self._run(keys[0] if keys else None, exchange)
        except UnavailableError as e:
            if self.on_error == "closed":
                raise
            return dataclasses.replace(fallback, error=e)  # type: ignore[type-var]

    def _confirmed(self, conn: Any, keys: List[Any], cost: int, times: Times, result: Any) -> Any:
        replicas, wait_ms = self.confirm  # type: ignore[misc]
        conn.send_command("WAIT", replicas, wait_ms)
        wait_s = None if self.timeout is None else self.timeout + wait_ms / 1000
        acked = int(read_within(conn, wait_s))
        if acked >= replicas:
            return dataclasses.replace(result, confirmed=True)
        if self.on_unconfirmed == "allow":
            return dataclasses.replace(result, confirmed=False)
        # Taken back exactly: this call's members, at the score they were logged with.
        at = score(result.now, *times)
        for key in keys:
            self._command(conn, "refund", [key], [key, cost, "AT", at], [cost, "AT", at])
        return dataclasses.replace(result, allowed=False, confirmed=False)

    def _run(self, key: Optional[Key], body: Callable[[Any], T]) -> T:
        """``body(connection)`` on a connection to the node of ``key``; failures of Redis as
        ``UnavailableError``. A cluster's MOVED reloads the slot map and tries once more."""
        return self._run_with(lambda: self._pool(key), body)

    def _run_on(self, target: Any, body: Callable[[Any], T]) -> T:
        """``body(connection)`` on a connection to ``target`` (a redis-py client of one node)."""
        return self._run_with(lambda: self._pool_of(target), body)

    def _run_with(self, pool: Callable[[], Connections], body: Callable[[Any], T]) -> T:
        for attempt in (0, 1):
            try:
                with pool().connection() as conn:
                    return body(conn)
            except redis.ResponseError as e:
                if self._cluster and attempt == 0 and isinstance(e, _REDIRECTS):
                    self._client.nodes_manager.initialize()
                    continue
                if unavailable(e):
                    raise UnavailableError(f"Redis did not decide: {e}") from e
                raise
            except (redis.ConnectionError, redis.TimeoutError, OSError) as e:
                raise UnavailableError(f"Redis did not decide: {type(e).__name__}: {e}") from e
        raise AssertionError("not reached")

    def _pool(self, key: Optional[Key]) -> Connections:
        if not self._cluster:
            target = self._client
        elif key is None:
            target = self._client.get_default_node().redis_connection
        else:
            target = self._client.get_node_from_key(key).redis_connection
        return self._pool_of(target)

    def _pool_of(self, target: Any) -> Connections:
        pool = target.connection_pool
        found = self._pools.get(id(pool))
        if found is None:
            found = self._pools.setdefault(id(pool), Connections(pool, self.timeout))
        return found

    def _detect(self, conn: Any) -> bool:
        if self._module is None:
            conn.send_command("COMMAND", "INFO", "slidingwindow.allow")
            info = conn.read_response()
            # One entry per name asked: nil for an unknown command, its description otherwise.
            self._module = any(v for v in (info.values() if isinstance(info, dict) else info or []))
        return self._module

    def _command(self, conn: Any, command: str, keys: List[Any], argv: List[Any], rest: List[Any]) -> Any:
        if self._detect(conn):
            try:
                conn.send_command(f"SLIDINGWINDOW.{command.upper()}", *argv)
                return conn.read_response()
            except redis.ResponseError as e:
                # The module was unloaded (or this is a new server behind the same address).
                if not self._auto or not str(e).lower().startswith("unknown command"):
                    raise
                self._module = False
        entropy = "".join(secrets.choice(CROCKFORD) for _ in range(16))
        script_args = [len(keys), *keys, command.lower() + self._script_word, entropy, *rest]
        try:
            conn.send_command("EVALSHA", SCRIPT_SHA, *script_args)
            return conn.read_response()
        except redis.exceptions.NoScriptError:
            conn.send_command("EVAL", SCRIPT, *script_args)
            return conn.read_response()


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
