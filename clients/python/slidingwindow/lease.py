"""A lease: permits of one key taken in bulk (``LEASE ms``) and handed out from memory. The
policy is ``LeasePolicy``'s steps (no I/O, no lock, no timer), shared by this module's ``Lease``
(threads) and ``slidingwindow.asyncio.Lease``."""

from __future__ import annotations

import dataclasses
import threading
import time
from typing import TYPE_CHECKING, Any, Callable, Generator, Optional, Tuple

from .protocol import Limits, drive, invoke, limit_list
from .results import Key, LimitState, Result, SlidingWindowError

if TYPE_CHECKING:
    from .limiter import SlidingWindow

#: A call of the helper the policy needs: its method's name, arguments and keyword arguments.
Call = Tuple[str, Tuple[Any, ...], dict]
#: The policy's steps: yield calls, are sent their answers (or have their exceptions thrown in).
LeaseSteps = Generator[Call, Any, Any]


class LeasePolicy:
    """Permits for one key and its limits, ``size`` at a time for ``duration_ms``.

    ``allow()`` hands out a permit from memory while the lease is live and has one; otherwise it
    takes a new lease (``ALLOW key ... COST size LEASE duration_ms DETAIL`` on the server's clock,
    or on ``clock``'s), whose members are logged at the lease's end so that no limit is ever
    exceeded. When a whole lease is refused but some permits remain, it leases those (so that
    near the limit every last permit is still handed out). When none remain, a ``PEEK`` learns
    how long until one does, and that refusal is remembered until its ``retry_after_ms``: the
    requests meanwhile are refused from memory, without a Redis call. The lease object's own
    refunds forget it. Unused permits go back (``REFUND key unused AT now+ms``) when the lease
    ends and on ``close()``.

    ``clock``: None (the default) sends ``*`` (the server's clock) and times the lease on this
    host's monotonic clock. A callable returning Unix ms (an int) is the caller's own clock: every
    call the lease sends passes ``now=clock()``, and everything it decides by time reads that
    clock: a lease taken at ``now`` is live while ``now <= clock() < now + duration_ms``, a
    refusal remembered from a ``PEEK`` sent at ``sent`` holds while ``clock() < sent +
    retry_after_ms``, waits run down by ``clock()`` less the time of the call they came from,
    and a reply from memory has ``now=clock()``. The caller's ``now`` has ``allow``'s rules
    (callers of one key in order, or the server's lateness covering their disorder). The timer
    that gives the unused permits back at the lease's end still counts real time.
    """

    def __init__(self, sw: Any, key: Key, limits: Limits, size: int, duration_ms: int,
                 clock: Optional[Callable[[], int]] = None) -> None:
        smallest = min(l.max for l in limit_list(limits))
        if not (isinstance(size, int) and 1 <= size <= smallest):
            raise ValueError(f"size must be an integer between 1 and the smallest max, {smallest}")
        if not (isinstance(duration_ms, int) and duration_ms >= 1):
            raise ValueError("duration_ms must be an integer >= 1 (ms)")
        if clock is not None and not callable(clock):
            raise ValueError("clock must be a callable returning Unix ms, or None (the server's clock)")
        self.sw, self.key, self.limits = sw, key, limits
        self.size, self.duration_ms = size, duration_ms
        self.clock = clock
        self._left = 0
        self._reply: Optional[Result] = None
        # Times are in ms on the lease's clock (``_time()``): the caller's, or monotonic time.
        self._taken = 0.0  # when the lease started: its call's now (caller's clock) or sending
        self._end = 0.0  # after which no permit of it is handed out
        self._refund_at = 0  # the lease's now + ms on the clock of its call: its members' score
        # Until when the last lease reply showed no permit left and no whole lease fitting:
        # before it, a PEEK learns the wait first.
        self._full_until = 0.0
        # A refused PEEK: its reply, the time it was sent, and until when it holds.
        self._refused: Optional[Tuple[Result, float, float]] = None
        self._refunds = 0  # bumped when one of its refunds starts and when it ends
        self._generation = 0  # bumped with each lease taken: its timer's ticket

    # What the drivers provide: the timer at the lease's end.

    def _arm(self, generation: int) -> None:
        """Starts the timer that calls back ``generation``'s end after ``duration_ms``."""
        raise NotImplementedError

    def _disarm(self) -> None:
        """Cancels the timer, if any."""
        raise NotImplementedError

    # The steps (under the driver's lock, except ``_send_refund``).

    def _allow(self) -> LeaseSteps:
        """One request: a permit from memory or from a new lease, the answer of a call, or a
        refusal remembered from a PEEK."""
        t = self._time()
        if self._live(t):
            self._left -= 1
            return self._from_memory(t)
        yield from self._refund_held(self._drop())
        if self._refused is not None:
            r, sent, until = self._refused
            if t < until:
                return self._run_down(r, t - sent)
            self._refused = None
        if t < self._full_until:
            r = yield from self._peek()
            if not r.allowed or r.error is not None:
                return r
        r = yield from self._take(self.size)
        if r.allowed or r.error is not None or r.confirmed is not None:
            return r
        fits = least(r)
        if fits >= 1:
            r = yield from self._take(fits)
            if r.allowed:
                return r
        r = yield from self._peek()
        if r.allowed and r.error is None:
            # Room appeared since the refused lease: a lease of one.
            r = yield from self._take(1)
        return r

    def _time(self) -> float:
        """Now on the lease's clock, in ms: the caller's clock, or monotonic time."""
        return int(self.clock()) if self.clock is not None else time.monotonic() * 1000

    def _now(self, t: float) -> Optional[int]:
        """The ``now`` a call sent at ``t`` passes: ``t`` on the caller's clock, else None (``*``)."""
        return None if self.clock is None else int(t)

    def _live(self, t: float) -> bool:
        """Whether the lease hands out a permit at ``t``."""
        return self._left > 0 and self._taken <= t < self._end

    def _take(self, n: int) -> LeaseSteps:
        """A lease of ``n`` permits, starting when its call is sent; admitted, its first permit."""
        sent = self._time()
        r = yield ("allow", (self.key, self.limits),
                   dict(cost=n, now=self._now(sent), lease=self.duration_ms, detail=True))
        if r.error is not None:
            return r  # unchecked (on_error="open"): no lease was taken
        if r.retry_after_ms < 0:
            raise SlidingWindowError(f"a lease of {n} never fits the limits of {self.key!r}")
        full = least(r) == 0
        self._full_until = sent + r.retry_after_ms if full else 0.0
        if not r.allowed:
            return r
        self._start(sent, r, n)
        self._left -= 1
        return self._from_memory(sent)

    def _peek(self) -> LeaseSteps:
        """Whether one permit fits now, changing nothing: a refusal with a wait that ends is
        remembered and answered."""
        refunds = self._refunds
        sent = self._time()
        r = yield ("peek", (self.key, self.limits), dict(now=self._now(sent), detail=True))
        self._full_until = 0.0
        if not r.allowed and r.retry_after_ms > 0 and self._refunds == refunds:
            self._refused = (r, sent, sent + r.retry_after_ms)
        return r

    def _start(self, t: float, r: Result, n: int) -> None:
        assert r.now is not None
        self._reply, self._taken = r, t
        self._left = n
        self._end = t + self.duration_ms
        self._refund_at = r.now + self.duration_ms
        self._generation += 1
        self._arm(self._generation)

    def _drop(self) -> Optional[Tuple[int, int]]:
        """Ends the current lease: its unused permits and their score, if any."""
        unused = (self._left, self._refund_at) if self._left > 0 else None
        self._left = 0
        self._end = 0.0
        self._disarm()
        return unused

    def _ending(self, generation: int) -> Optional[Tuple[int, int]]:
        """The timer of ``generation`` went off: that lease's unused permits, if it is still the
        current one."""
        unused = self._drop() if self._generation == generation else None
        if unused is not None:
            self._forget()
        return unused

    def _forget(self) -> None:
        """A refund of this object's: its refusals may no longer hold."""
        self._refunds += 1
        self._refused = None
        self._full_until = 0.0

    def _refund_held(self, unused: Optional[Tuple[int, int]]) -> LeaseSteps:
        """Gives ``unused`` back while holding the lock (no call of this object overlaps it)."""
        if unused is not None:
            self._forget()
            yield from self._send_refund(unused, quiet=True)
            self._forget()

    def _send_refund(self, unused: Tuple[int, int], quiet: bool) -> LeaseSteps:
        n, at = unused
        try:
            return (yield ("refund", (self.key, n), dict(at=at)))
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
        elapsed = int(t - self._taken)

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

    @staticmethod
    def _run_down(r: Result, since: float) -> Result:
        """A remembered refusal as of ``since`` ms after its call: its waits run down."""
        elapsed = int(since)

        def state(s: LimitState) -> LimitState:
            return s._replace(retry_after_ms=max(0, s.retry_after_ms - elapsed),
                              reset_after_ms=max(0, s.reset_after_ms - elapsed))

        return dataclasses.replace(
            r, retry_after_ms=max(0, r.retry_after_ms - elapsed), reset_after_ms=max(0, r.reset_after_ms - elapsed),
            states=None if r.states is None else tuple(state(s) for s in r.states),
            now=None if r.now is None else r.now + elapsed,
        )


class Lease(LeasePolicy):
    """A ``LeasePolicy`` over the synchronous helper: safe to share between threads (one Redis
    call at a time); a thread's timer gives the unused permits back at the lease's end."""

    sw: "SlidingWindow"

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._lock = threading.Lock()
        self._timer: Optional[threading.Timer] = None

    def allow(self) -> Result:
        """One request: a permit from memory or from a new lease, the answer of a call, or a
        refusal remembered from a PEEK."""
        with self._lock:
            return drive(self._allow(), self._execute)

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
            return self._left if self._live(self._time()) else 0

    def _execute(self, call: Call) -> Any:
        return invoke(self.sw, call)

    def _arm(self, generation: int) -> None:
        timer = threading.Timer(self.duration_ms / 1000, self._ended, args=(generation,))
        timer.daemon = True
        self._timer = timer
        timer.start()

    def _disarm(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None

    def _ended(self, generation: int) -> None:
        """The timer at the lease's end: its unused permits go back."""
        with self._lock:
            unused = self._ending(generation)
        self._refund(unused)

    def _refund(self, unused: Optional[Tuple[int, int]], quiet: bool = True) -> int:
        if unused is None:
            return 0
        with self._lock:
            self._forget()
        try:
            return drive(self._send_refund(unused, quiet), self._execute)
        finally:
            with self._lock:
                self._forget()


def least(r: Result) -> int:
    """The fewest permits left in any limit of a reply."""
    return min(s.remaining for s in r.states) if r.states else r.remaining
