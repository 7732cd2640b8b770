"""The helper's own connections to the server a redis-py client points at.

They are made from the client's pool (its connection class and arguments: the same address,
credentials, TLS, protocol, and for a Sentinel-managed pool the same master lookup), but with the
helper's timeout on connecting and on every reply and without redis-py's retries, so that a call
never takes longer than that; and a call that needs two commands on one connection (``WAIT``
after an admission) gets them.
"""

from __future__ import annotations

import threading
from contextlib import contextmanager
from typing import Any, Iterator, List, Optional

import redis
from redis.backoff import NoBackoff
from redis.retry import Retry


class Connections:
    """A thread-safe stack of idle connections, made on demand."""

    def __init__(self, pool: Any, timeout: Optional[float]) -> None:
        kwargs = dict(pool.connection_kwargs)
        if timeout is not None:
            kwargs.update(socket_timeout=timeout, socket_connect_timeout=timeout)
        kwargs["retry"] = Retry(NoBackoff(), 0)
        self._class = pool.connection_class
        self._kwargs = kwargs
        self._idle: List[Any] = []
        self._lock = threading.Lock()

    @contextmanager
    def connection(self) -> Iterator[Any]:
        with self._lock:
            conn = self._idle.pop() if self._idle else None
        if conn is None:
            conn = self._class(**self._kwargs)
        try:
            # As redis-py's own pool does: a Sentinel-managed connection finds its master here.
            conn.connect()
            yield conn
        except redis.ResponseError:
            # A whole error reply was read: the connection is in step.
            self._put(conn)
            raise
        except BaseException:
            # A reply may still be on its way: start over on a new socket next time.
            conn.disconnect()
            self._put(conn)
            raise
        self._put(conn)

    def _put(self, conn: Any) -> None:
        with self._lock:
            self._idle.append(conn)

    def close(self) -> None:
        with self._lock:
            idle, self._idle = self._idle, []
        for conn in idle:
            conn.disconnect()


def read_within(conn: Any, seconds: Optional[float]) -> Any:
    """The next reply, waiting up to ``seconds`` for it (None: the connection's own timeout)."""
    sock = getattr(conn, "_sock", None)
    if seconds is None or sock is None:
        return conn.read_response()
    sock.settimeout(seconds)
    try:
        return conn.read_response()
    finally:
        if getattr(conn, "_sock", None) is sock:
            sock.settimeout(conn.socket_timeout)
