"""The asyncio ``Lease``: ``slidingwindow.lease.LeasePolicy``'s steps over the asyncio helper."""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING, Any, Optional, Set, Tuple

from ..lease import Call, LeasePolicy
from ..protocol import invoke
from ..results import Result
from .limiter import drive

if TYPE_CHECKING:
    from .limiter import SlidingWindow


class Lease(LeasePolicy):
    """As ``slidingwindow.Lease`` (see ``LeasePolicy``), its ``allow()`` and ``close()``
    coroutines: tasks of one event loop may share it (one Redis call at a time); a timer on the
    loop gives the unused permits back at the lease's end. ``async with`` closes it."""

    sw: "SlidingWindow"

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._lock = asyncio.Lock()
        self._timer: Optional[asyncio.TimerHandle] = None
        self._endings: Set["asyncio.Task[None]"] = set()

    async def allow(self) -> Result:
        """One request: a permit from memory or from a new lease, the answer of a call, or a
        refusal remembered from a PEEK."""
        async with self._lock:
            return await drive(self._allow(), self._execute)

    async def close(self) -> int:
        """Gives the unused permits back now; answers how many the server took back. A later
        ``allow()`` takes a new lease."""
        async with self._lock:
            unused = self._drop()
        return await self._refund(unused, quiet=False)

    async def __aenter__(self) -> "Lease":
        return self

    async def __aexit__(self, *exc: Any) -> None:
        await self.close()

    @property
    def permits(self) -> int:
        """Permits held in memory now (0 once the lease has ended)."""
        return self._left if self._live(self._time()) else 0

    def _execute(self, call: Call) -> Any:
        return invoke(self.sw, call)

    def _arm(self, generation: int) -> None:
        self._timer = asyncio.get_running_loop().call_later(self.duration_ms / 1000, self._fire, generation)

    def _disarm(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None

    def _fire(self, generation: int) -> None:
        task = asyncio.get_running_loop().create_task(self._ended(generation))
        # The loop keeps only a weak reference to a task.
        self._endings.add(task)
        task.add_done_callback(self._endings.discard)

    async def _ended(self, generation: int) -> None:
        """The timer at the lease's end: its unused permits go back."""
        async with self._lock:
            unused = self._ending(generation)
        await self._refund(unused)

    async def _refund(self, unused: Optional[Tuple[int, int]], quiet: bool = True) -> int:
        if unused is None:
            return 0
        async with self._lock:
            self._forget()
        try:
            return await drive(self._send_refund(unused, quiet), self._execute)
        finally:
            async with self._lock:
                self._forget()
