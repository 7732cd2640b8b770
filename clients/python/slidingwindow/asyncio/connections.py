"""The asyncio helper's own connections to the server a ``redis.asyncio`` client (or one node of
a ``redis.asyncio.RedisCluster``) points at: made from its connection class and arguments (the
same address, credentials, TLS, protocol), with the helper's timeout on connecting and on every
reply and without redis-py's retries, as ``slidingwindow.connections`` does for threads."""

from __future__ import annotations

from contextlib import asynccontextmanager
from typing import Any, AsyncIterator, List, Optional

import redis
from redis.asyncio.retry import Retry
from redis.backoff import NoBackoff


class Connections:
    """A stack of idle connections, made on demand (one event loop: no lock needed)."""

    def __init__(self, connection_class: Any, connection_kwargs: dict, timeout: Optional[float]) -> None:
        kwargs = dict(connection_kwargs)
        if timeout is not None:
            kwargs.update(socket_timeout=timeout, socket_connect_timeout=timeout)
        kwargs["retry"] = Retry(NoBackoff(), 0)
        self._class = connection_class
        self._kwargs = kwargs
        self._idle: List[Any] = []

    @asynccontextmanager
    async def connection(self) -> AsyncIterator[Any]:
        conn = self._idle.pop() if self._idle else self._class(**self._kwargs)
        try:
            await conn.connect()
            yield conn
        except redis.ResponseError:
            # A whole error reply was read: the connection is in step.
            self._idle.append(conn)
            raise
        except BaseException:
            # A reply may still be on its way (a timeout, a cancelled task): a new socket next time.
            await conn.disconnect(nowait=True)
            self._idle.append(conn)
            raise
        self._idle.append(conn)

    async def close(self) -> None:
        idle, self._idle = self._idle, []
        for conn in idle:
            await conn.disconnect()
