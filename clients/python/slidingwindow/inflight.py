"""In-flight limits and costs known after the response, over ALLOW and REFUND ... AT.

A slot is an ALLOW on a window as long as the longest a request may hold it: the member leaves
the window by itself when the hold passes, so a holder that dies frees its slot then, and a
release takes it back at once (``REFUND key 1 AT`` the score the acquire logged). A reservation
is an ALLOW of the cost expected, settled when the real cost is known: the difference is refunded
at the reservation's score, or the excess charged with an ALLOW of its own.
"""

from __future__ import annotations

import functools
import threading
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Generator

from .protocol import drive, invoke
from .results import Key, Limit, Result, SlidingWindowError

if TYPE_CHECKING:
    from .limiter import SlidingWindow
    from .protocol import Limits


class _Charged:
    """An ALLOW's ``result`` on ``key``, to be given back at most once."""

    def __init__(self, sw: "SlidingWindow", key: Key, result: Result) -> None:
        self._sw = sw
        self.key = key
        self.result = result
        self._lock = threading.Lock()
        # A fail-open result (on_error="open") logged nothing: nothing to give back.
        self._held = result.allowed and result.now is not None

    @property
    def allowed(self) -> bool:
        return self.result.allowed

    def _take(self) -> bool:
        """True the first time only, and only when the ALLOW logged something."""
        with self._lock:
            held, self._held = self._held, False
        return held


class Slot(_Charged):
    """One request in flight (``SlidingWindow.acquire``). ``allowed`` says whether it got a slot;
    ``release()`` (or leaving the ``with`` block) gives it back once."""

    def release(self) -> bool:
        """Gives the slot back (``REFUND key 1 AT`` the acquire's ``now``); True when a member
        was taken back, False when there was none (refused, already released, or the hold had
        passed)."""
        return drive(self._release(), functools.partial(invoke, self._sw))

    def _release(self) -> Generator[Any, Any, bool]:
        if not self._take():
            return False
        return (yield ("refund", (self.key, 1), {"at": self.result.now})) == 1

    def __enter__(self) -> "Slot":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.release()


@dataclass(frozen=True)
class Settlement:
    """What ``Reservation.settle`` did: requests ``refunded`` (reserved but unused), ``charged``
    (used beyond the reservation, admitted by an ALLOW of their own) and ``overrun`` (used beyond
    the reservation and refused by the limits: spent anyway, counted here, never hidden)."""

    refunded: int
    charged: int
    overrun: int


class Reservation(_Charged):
    """``n`` requests charged before the real cost is known (``SlidingWindow.reserve``).
    ``allowed`` says whether they were; ``settle(used)`` or ``cancel()`` closes it once."""

    def __init__(self, sw: "SlidingWindow", key: Key, limits: "Limits", n: int, result: Result) -> None:
        super().__init__(sw, key, result)
        self.limits = limits
        self.n = n

    def settle(self, used: int) -> Settlement:
        """The real cost: ``used < n`` refunds ``n - used`` at the reservation's score; ``used >
        n`` charges ``used - n`` with an ALLOW (``COST used - n``) on the same limits, an overrun
        when it does not fit."""
        return drive(self._settle(used), functools.partial(invoke, self._sw))

    def cancel(self) -> int:
        """Refunds the whole reservation; answers the requests taken back."""
        return drive(self._cancel(), functools.partial(invoke, self._sw))

    def _settle(self, used: int) -> Generator[Any, Any, Settlement]:
        if not (isinstance(used, int) and not isinstance(used, bool) and used >= 0):
            raise ValueError("used must be an integer >= 0")
        self._close()
        if used < self.n:
            refunded = yield ("refund", (self.key, self.n - used), {"at": self.result.now})
            return Settlement(refunded, 0, 0)
        if used > self.n:
            extra = used - self.n
            charged = (yield ("allow", (self.key, self.limits), {"cost": extra})).allowed
            return Settlement(0, extra if charged else 0, 0 if charged else extra)
        return Settlement(0, 0, 0)

    def _cancel(self) -> Generator[Any, Any, int]:
        self._close()
        return (yield ("refund", (self.key, self.n), {"at": self.result.now}))

    def _close(self) -> None:
        if not self._take():
            raise SlidingWindowError("this reservation was refused, or is already settled or cancelled")


def acquire(sw: "SlidingWindow", key: Key, limit: int, hold: int) -> Slot:
    """A slot among ``limit`` for ``key``, held at most ``hold`` seconds."""
    return Slot(sw, key, sw.allow(key, Limit(hold, limit), detail=True))


def reserve(sw: "SlidingWindow", key: Key, limits: "Limits", n: int) -> Reservation:
    """``n`` requests charged on ``key``'s limits, to settle later."""
    return Reservation(sw, key, limits, n, sw.allow(key, limits, cost=n, detail=True))
