"""SlidingWindow: the calls, on the module or on the Lua script, and what happens on a bad day,
over a synchronous redis-py client (the steps themselves are in ``protocol``)."""

from __future__ import annotations

from typing import Any, Callable, Dict, List, Optional, Sequence, TypeVar, Union

from .connections import Connections, read_within
from .protocol import Core, KeyedLimits, Limits, Plan, Request, Steps, drive, refund_args, top_count, top_entries
from .results import AllResult, Key, Result, TopEntry, UnavailableError

T = TypeVar("T")


class SlidingWindow(Core):
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

    _pools: Dict[Any, Connections]

    # The typed calls.

    def allow(self, key: Key, limits: Limits, cost: int = 1, now: Optional[int] = None, *,
              lease: Optional[int] = None, precision: Optional[int] = None, detail: bool = False) -> Result:
        """Admits the request if it fits every limit (and logs it); ``now`` in Unix ms, None = the
        server's clock. ``lease=ms`` logs an admitted call's members at ``now + ms`` (see
        ``lease()``); ``precision=p`` logs them at that time rounded up to a multiple of ``p`` ms
        (a key then holds a bounded number of distinct times, whatever the rate);
        ``detail=True`` adds every limit's state and the ``now`` used."""
        return self._decide(self._plan("allow", key, limits, cost, now, (lease, precision), detail))

    def peek(self, key: Key, limits: Limits, cost: int = 1, now: Optional[int] = None, *,
             lease: Optional[int] = None, precision: Optional[int] = None, detail: bool = False) -> Result:
        """What ``allow`` would answer now, changing nothing."""
        return self._decide(self._plan("peek", key, limits, cost, now, (lease, precision), detail))

    def allow_all(self, limits: KeyedLimits, cost: int = 1, now: Optional[int] = None, *,
                  lease: Optional[int] = None, precision: Optional[int] = None, detail: bool = False) -> AllResult:
        """Admits the request if it fits every limit of every key, and then logs it on every key
        (all or nothing, one atomic call). ``limits``: ``{key: limits}`` or ``(key, limits)`` pairs."""
        return self._decide(self._plan_all("allowall", limits, cost, now, (lease, precision), detail))

    def peek_all(self, limits: KeyedLimits, cost: int = 1, now: Optional[int] = None, *,
                 lease: Optional[int] = None, precision: Optional[int] = None, detail: bool = False) -> AllResult:
        """What ``allow_all`` would answer now, changing nothing."""
        return self._decide(self._plan_all("peekall", limits, cost, now, (lease, precision), detail))

    def refund(self, key: Key, n: int = 1, at: Union[int, str, None] = None) -> int:
        """Takes back up to ``n`` logged requests (the newest scored at or before ``at``: pass the
        ``now`` the request was admitted with; None: the newest whatever their score, ``"*"``: the
        server's clock). Answers how many were removed; raises ``UnavailableError`` when Redis
        does not answer."""
        return int(self.call("refund", key, refund_args(n, at)))

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
        count = top_count(count)
        masters = self._client.get_primaries() if self._cluster else [None]
        replies = [self._run_on(self._client if node is None else node.redis_connection, lambda: self._top_of_node(count))
                   for node in masters]
        return top_entries(replies, count)

    @property
    def uses_module(self) -> bool:
        """Whether calls go to the module (else to the script); asks the server the first time."""
        return self._run(None, self._detect)

    # Raw replies.

    def call(self, command: str, key: Key, args: Sequence[Any]) -> Any:
        """The raw reply of SLIDINGWINDOW.<command> key args..., on whichever path is in use.
        Raises ``redis.ResponseError`` for the call's own errors, ``UnavailableError`` when Redis
        does not decide."""
        return self._run(key, lambda: self._raw(command, key, args))

    def call_keys(self, command: str, args: Sequence[Any]) -> Any:
        """The raw reply of SLIDINGWINDOW.ALLOWALL|PEEKALL numkeys key... rest..., on either path."""
        return self._run(*self._raw_keys(command, args))

    def close(self) -> None:
        """Closes the helper's own connections (the client's are left alone)."""
        for pool in list(self._pools.values()):
            pool.close()

    # Internals.

    def _decide(self, plan: Plan) -> Any:
        """One typed call; the on_error policy when Redis does not decide."""
        try:
            return self._run(plan.keys[0] if plan.keys else None, lambda: self._exchange(plan))
        except UnavailableError as e:
            return self._failed(plan, e)

    def _run(self, key: Optional[Key], steps: Callable[[], Steps[T]]) -> T:
        """``steps`` on a connection to the node of ``key``; failures of Redis as
        ``UnavailableError``. A cluster's MOVED reloads the slot map and tries once more."""
        return self._run_with(lambda: self._pool(key), steps)

    def _run_on(self, target: Any, steps: Callable[[], Steps[T]]) -> T:
        """``steps`` on a connection to ``target`` (a redis-py client of one node)."""
        return self._run_with(lambda: self._pool_of(target), steps)

    def _run_with(self, pool: Callable[[], Connections], steps: Callable[[], Steps[T]]) -> T:
        for attempt in (0, 1):
            try:
                with pool().connection() as conn:
                    return drive(steps(), lambda request: exchange(conn, request))
            except Exception as e:
                failure = self._failure(e, attempt)
                if failure is None:
                    self._client.nodes_manager.initialize()
                    continue
                if failure is e:
                    raise
                raise failure from e
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


def exchange(conn: Any, request: Request) -> Any:
    """One command on ``conn`` and its reply."""
    conn.send_command(*request.words)
    return read_within(conn, request.timeout)
