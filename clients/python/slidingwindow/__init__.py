"""Sliding-window rate limits on Redis: SLIDINGWINDOW.ALLOW / PEEK / ALLOWALL / PEEKALL / REFUND
where the module is loaded, the same contract in a Lua script (EVALSHA) where it is not, with
identical replies and keys; leases, a call timeout, fail-open or -closed, WAIT after admissions,
and the HTTP headers."""

from .headers import canonical_ip, headers, policy_header, ratelimit_header, retry_after_header, seconds_up
from .inflight import Reservation, Settlement, Slot
from .lease import Lease
from .limiter import SlidingWindow
from .protocol import CROCKFORD, SCRIPT, arguments
from .results import AllResult, Limit, LimitState, Result, SlidingWindowError, TopEntry, UnavailableError

__all__ = [
    "AllResult", "Lease", "Limit", "LimitState", "Reservation", "Result", "SCRIPT", "Settlement", "SlidingWindow",
    "SlidingWindowError", "Slot", "TopEntry",
    "UnavailableError", "arguments", "canonical_ip", "headers", "policy_header", "ratelimit_header",
    "retry_after_header", "seconds_up",
]
