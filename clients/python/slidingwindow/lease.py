"""A lease: permits of one key taken in bulk (``LEASE ms``) and handed out from memory."""

from __future__ import annotations

import dataclasses
import math
import threading
import time
from typing import TYPE_CHECKING, Any, Optional, Tuple

from .results import Key, LimitState, Result

if TYPE_CHECKING:
    from .limiter import Limits, SlidingWindow


class Lease:
    """Permits for one key and its limits, ``size`` at a time for ``duration_ms``.

    ``allow()`` hands out a permit from memory while the lease is live and has one; otherwise it
    takes a new lease (``ALLOW key ... COST size LEASE duration_ms DETAIL`` on the server's clock),
    whose members are logged at the lease's end so that no limit is ever exceeded. When a lease
    is refused it makes one exact call per request (so that near the limit every last permit is
    still handed out) until the refusal's wait for a whole lease has passed. Unused permits go
    back (``REFUND key unused AT now+ms``) when the lease ends and on ``close()``. Safe to share
    between threads.
    """

    def __init__(self, sw: "SlidingWindow", key: Key, limits: "Limits", size: int, duration_ms: int) -> None:
        if not (isinstance(size, int) and size >= 1):
            raise ValueError("size must be an integer >= 1")
        if not (isinstance(duration_ms, int) and duration_ms >= 1):
            raise ValueError("duration_ms must be an integer >= 1 (ms)")
        self.sw, self.key, self.limits = sw, key, limits
        self.size, self.duration_ms = size, duration_ms
        self._lock = threading.Lock()
        self._left = 0
        self._reply: Optional[Result] = None
        self._taken = 0.0  # monotonic time the lease call was sent
        self._end = 0.0  # monotonic time after which no permit of it is handed out
        self._refund_at = 0  # the lease's now + ms on the server's clock: its members' score
        self._lease_again = 0.0  # after a refused lease: monotonic time to try a whole one again
        self._timer: Optional[threading.Timer] = None
        self._generation = 0

    def allow(self) -> Result:
        """One request: a permit from memory, from a new lease, or from an exact call."""
        with self._lock:
            t = time.monotonic()
            if self._left > 0 and t < self._end:
                self._left -= 1
                return self._from_memory(t)
            unused = self._drop()
            leasing = t >= self._lease_again
            if leasing:
                self._refund(unused)
                unused = None
                r = self.sw.allow(self.key, self.limits, cost=self.size, lease=self.duration_ms, detail=True)
                if r.allowed and r.error is None:
                    self._start(t, r)
                    self._left -= 1
                    return self._from_memory(t)
                if r.error is not None:
                    return r  # unchecked (on_error="open"): no lease was taken
                wait = r.retry_after_ms
                self._lease_again = math.inf if wait < 0 else t + wait / 1000
        self._refund(unused)
        return self.sw.allow(self.key, self.limits, detail=True)

    def close(self) -> int:
        """Gives the unused permits back now; answers how many the server took back. A later
        ``allow()`` takes a new lease."""
        with self._lock:
            unused = self._drop()
        return self._refund(unused, quiet=False)

    def __enter__(self) -> "Lease":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    @property
    def permits(self) -> int:
        """Permits held in memory now (0 once the lease has ended)."""
        with self._lock:
            return self._left if time.monotonic() < self._end else 0

    def _start(self, t: float, r: Result) -> None:
        assert r.now is not None
        self._reply, self._taken = r, t
        self._left = self.size
        self._end = t + self.duration_ms / 1000
        self._refund_at = r.now + self.duration_ms
        self._lease_again = 0.0
        self._generation += 1
        timer = threading.Timer(self.duration_ms / 1000, self._ended, args=(self._generation,))
        timer.daemon = True
        self._timer = timer
        timer.start()

    def _ended(self, generation: int) -> None:
        """The timer at the lease's end: its unused permits go back."""
        with self._lock:
            unused = self._drop() if self._generation == generation else None
        self._refund(unused)

    def _drop(self) -> Optional[Tuple[int, int]]:
        """Ends the current lease (under the lock): its unused permits and their score, if any."""
        unused = (self._left, self._refund_at) if self._left > 0 else None
        self._left = 0
        self._end = 0.0
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        return unused

    def _refund(self, unused: Optional[Tuple[int, int]], quiet: bool = True) -> int:
        if unused is None:
            return 0
        n, at = unused
        try:
            return self.sw.refund(self.key, n, at=at)
        except Exception:
            # Redis is away: the permits stay logged until their window passes (capacity held
            # back, never admitted twice).
            if not quiet:
                raise
            return 0

    def _from_memory(self, t: float) -> Result:
        """The lease's reply as of now: its held permits count as free, its waits run down."""
        r = self._reply
        assert r is not None
        left = self._left
        elapsed = int((t - self._taken) * 1000)

        def state(count: int, remaining: int, retry: int, reset: int) -> LimitState:
            free = remaining + left
            return LimitState(count - left, free, 0 if free >= 1 else max(0, retry - elapsed), max(0, reset - elapsed))

        binding = state(r.count, r.remaining, r.retry_after_ms, r.reset_after_ms)
        states = None if r.states is None else tuple(state(*s) for s in r.states)
        return dataclasses.replace(
            r, allowed=True, count=binding.count, remaining=binding.remaining,
            retry_after_ms=binding.retry_after_ms, reset_after_ms=binding.reset_after_ms,
            states=states, now=None if r.now is None else r.now + elapsed,
        )
