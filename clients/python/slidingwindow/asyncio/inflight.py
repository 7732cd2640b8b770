"""The asyncio helper's slots and reservations: ``slidingwindow.inflight``'s, their calls awaited
(the same steps)."""

from __future__ import annotations

import functools
from typing import Any, NoReturn

from .. import inflight
from ..protocol import invoke
from .limiter import drive


class Slot(inflight.Slot):
    """As ``slidingwindow.Slot``; ``release()`` is a coroutine, and ``async with`` releases it."""

    async def release(self) -> bool:  # type: ignore[override]
        """As ``slidingwindow.Slot.release``."""
        return await drive(self._release(), functools.partial(invoke, self._sw))

    def __enter__(self) -> NoReturn:
        raise TypeError("use `async with` on the asyncio helper's slot")

    async def __aenter__(self) -> "Slot":
        return self

    async def __aexit__(self, *exc: Any) -> None:
        await self.release()


class Reservation(inflight.Reservation):
    """As ``slidingwindow.Reservation``; ``settle()`` and ``cancel()`` are coroutines."""

    async def settle(self, used: int) -> inflight.Settlement:  # type: ignore[override]
        """As ``slidingwindow.Reservation.settle``."""
        return await drive(self._settle(used), functools.partial(invoke, self._sw))

    async def cancel(self) -> int:  # type: ignore[override]
        """As ``slidingwindow.Reservation.cancel``."""
        return await drive(self._cancel(), functools.partial(invoke, self._sw))
