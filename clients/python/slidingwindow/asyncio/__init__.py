"""The helper over redis-py's asyncio clients (``redis.asyncio.Redis``, ``RedisCluster``): the
same names, settings and results as ``slidingwindow``'s, each call a coroutine::

    import redis.asyncio as redis
    from slidingwindow import Limit
    from slidingwindow.asyncio import SlidingWindow

    sw = SlidingWindow(redis.Redis())
    r = await sw.allow("rl:{user:42}", [Limit(1, 10), Limit(60, 100)])
"""

from ..inflight import Settlement
from ..results import AllResult, Limit, LimitState, Result, SlidingWindowError, TopEntry, UnavailableError
from .inflight import Reservation, Slot
from .lease import Lease
from .limiter import SlidingWindow

__all__ = ["AllResult", "Lease", "Limit", "LimitState", "Reservation", "Result", "Settlement", "SlidingWindow",
           "SlidingWindowError", "Slot", "TopEntry", "UnavailableError"]
