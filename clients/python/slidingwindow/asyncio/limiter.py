"""The asyncio helper: ``slidingwindow.SlidingWindow``'s calls, names and results over
``redis.asyncio.Redis`` or ``redis.asyncio.RedisCluster``, each a coroutine. The steps are the
synchronous helper's own (``slidingwindow.protocol``); only the I/O differs."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Awaitable, Callable, Dict, Generator, List, Optional, Sequence, TypeVar, Union

from ..protocol import Core, KeyedLimits, Limits, Plan, Request, Steps, refund_args, resume, top_count, top_entries
from ..results import AllResult, Key, Limit, Result, TopEntry, UnavailableError
from .connections import Connections

if TYPE_CHECKING:
    from .inflight import Reservation, Slot
    from .lease import Lease

T = TypeVar("T")


async def drive(steps: Generator[Any, Any, T], execute: Callable[[Any], Awaitable[Any]]) -> T:
    """``slidingwindow.protocol.drive`` with a coroutine for ``execute``."""
    done, value = resume(steps, None, None)
    while not done:
        try:
            reply, error = await execute(value), None
        except Exception as e:
            reply, error = None, e
        done, value = resume(steps, reply, error)
    return value


class SlidingWindow(Core):
    """Rate limits over one ``redis.asyncio`` client (``Redis``, a Sentinel's ``master_for(...)``,
    or ``RedisCluster``): the settings, calls and results of ``slidingwindow.SlidingWindow``, each
    call a coroutine. Use it from one event loop."""

    _pools: Dict[Any, Connections]

    # The typed calls: as slidingwindow.SlidingWindow's.

    async def allow(self, key: Key, limits: Limits, cost: int = 1, now: Optional[int] = None, *,
                    lease: Optional[int] = None, precision: Optional[int] = None, detail: bool = False) -> Result:
        """As ``slidingwindow.SlidingWindow.allow``."""
        return await self._decide(self._plan("allow", key, limits, cost, now, (lease, precision), detail))

    async def peek(self, key: Key, limits: Limits, cost: int = 1, now: Optional[int] = None, *,
                   lease: Optional[int] = None, precision: Optional[int] = None, detail: bool = False) -> Result:
        """As ``slidingwindow.SlidingWindow.peek``."""
        return await self._decide(self._plan("peek", key, limits, cost, now, (lease, precision), detail))

    async def allow_all(self, limits: KeyedLimits, cost: int = 1, now: Optional[int] = None, *,
                        lease: Optional[int] = None, precision: Optional[int] = None,
                        detail: bool = False) -> AllResult:
        """As ``slidingwindow.SlidingWindow.allow_all``."""
        return await self._decide(self._plan_all("allowall", limits, cost, now, (lease, precision), detail))

    async def peek_all(self, limits: KeyedLimits, cost: int = 1, now: Optional[int] = None, *,
                       lease: Optional[int] = None, precision: Optional[int] = None,
                       detail: bool = False) -> AllResult:
        """As ``slidingwindow.SlidingWindow.peek_all``."""
        return await self._decide(self._plan_all("peekall", limits, cost, now, (lease, precision), detail))

    async def refund(self, key: Key, n: int = 1, at: Union[int, str, None] = None) -> int:
        """As ``slidingwindow.SlidingWindow.refund``."""
        return int(await self.call("refund", key, refund_args(n, at)))

    def lease(self, key: Key, limits: Limits, size: int, duration_ms: int,
              clock: Optional[Callable[[], int]] = None) -> "Lease":
        """An asyncio ``Lease`` (see ``slidingwindow.SlidingWindow.lease``); made without a call."""
        from .lease import Lease

        return Lease(self, key, limits, size, duration_ms, clock=clock)

    async def acquire(self, key: Key, limit: int, hold: int) -> "Slot":
        """As ``slidingwindow.SlidingWindow.acquire``: ``async with await sw.acquire(key, 10, 30)
        as slot: if slot.allowed: ...``."""
        from .inflight import Slot

        return Slot(self, key, await self.allow(key, Limit(hold, limit), detail=True))

    async def reserve(self, key: Key, limits: Limits, n: int) -> "Reservation":
        """As ``slidingwindow.SlidingWindow.reserve``; settle with ``await r.settle(used)``."""
        from .inflight import Reservation

        return Reservation(self, key, limits, n, await self.allow(key, limits, cost=n, detail=True))

    async def top(self, count: int = 10) -> List[TopEntry]:
        """As ``slidingwindow.SlidingWindow.top``."""
        count = top_count(count)
        await self._ready()
        if not self._cluster:
            replies = [await self._run(None, lambda: self._top_of_node(count))]
        else:
            replies = [await self._run_on(node, lambda: self._top_of_node(count)) for node in self._client.get_primaries()]
        return top_entries(replies, count)

    @property
    def uses_module(self) -> Awaitable[bool]:
        """``await sw.uses_module``: whether calls go to the module (else to the script); asks the
        server the first time."""
        return self._run(None, self._detect)

    async def call(self, command: str, key: Key, args: Sequence[Any]) -> Any:
        """As ``slidingwindow.SlidingWindow.call``."""
        return await self._run(key, lambda: self._raw(command, key, args))

    async def call_keys(self, command: str, args: Sequence[Any]) -> Any:
        """As ``slidingwindow.SlidingWindow.call_keys``."""
        return await self._run(*self._raw_keys(command, args))

    async def close(self) -> None:
        """Closes the helper's own connections (the client's are left alone)."""
        for pool in list(self._pools.values()):
            await pool.close()

    async def __aenter__(self) -> "SlidingWindow":
        return self

    async def __aexit__(self, *exc: Any) -> None:
        await self.close()

    # Internals.

    async def _decide(self, plan: Plan) -> Any:
        try:
            return await self._run(plan.keys[0] if plan.keys else None, lambda: self._exchange(plan))
        except UnavailableError as e:
            return self._failed(plan, e)

    async def _run(self, key: Optional[Key], steps: Callable[[], Steps[T]]) -> T:
        """``steps`` on a connection to the node of ``key``; failures of Redis as
        ``UnavailableError``. A cluster's MOVED reloads the slot map and tries once more."""
        return await self._run_with(lambda: self._pool(key), steps)

    async def _run_on(self, node: Any, steps: Callable[[], Steps[T]]) -> T:
        """``steps`` on one node of a cluster (a ``redis.asyncio.cluster.ClusterNode``)."""
        return await self._run_with(lambda: self._pool_of(node), steps)

    async def _run_with(self, pool: Callable[[], Connections], steps: Callable[[], Steps[T]]) -> T:
        for attempt in (0, 1):
            try:
                await self._ready()
                async with pool().connection() as conn:
                    return await drive(steps(), lambda request: exchange(conn, request))
            except Exception as e:
                failure = self._failure(e, attempt)
                if failure is None:
                    await self._client.nodes_manager.initialize()
                    continue
                if failure is e:
                    raise
                raise failure from e
        raise AssertionError("not reached")

    async def _ready(self) -> None:
        """A cluster client learns its slot map on its first command, or here."""
        if self._cluster and not self._client.nodes_manager.slots_cache:
            await self._client.initialize()

    def _pool(self, key: Optional[Key]) -> Connections:
        if not self._cluster:
            pool = self._client.connection_pool
            return self._pool_for(id(pool), pool.connection_class, pool.connection_kwargs)
        node = self._client.get_default_node() if key is None else self._client.get_node_from_key(key)
        return self._pool_of(node)

    def _pool_of(self, node: Any) -> Connections:
        """The connections to one node of a cluster (a ``redis.asyncio.cluster.ClusterNode``)."""
        return self._pool_for(node.name, node.connection_class, node.connection_kwargs)

    def _pool_for(self, name: Any, connection_class: Any, kwargs: dict) -> Connections:
        found = self._pools.get(name)
        if found is None:
            found = self._pools[name] = Connections(connection_class, kwargs, self.timeout)
        return found


async def exchange(conn: Any, request: Request) -> Any:
    """One command on ``conn`` and its reply, within the request's timeout if it has one."""
    await conn.send_command(*request.words)
    if request.timeout is None:
        return await conn.read_response()
    return await conn.read_response(timeout=request.timeout)
