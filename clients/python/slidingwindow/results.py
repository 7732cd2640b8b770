"""The typed values: limits, replies, and the errors the helper raises."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import NamedTuple, Optional, Sequence, Tuple, Union


class Limit(NamedTuple):
    """At most ``max`` requests (weighted by cost) in any ``window`` seconds."""

    window: int
    max: int


class LimitState(NamedTuple):
    """One limit's state after a call (``DETAIL``), as the contract's "Several limits" defines it."""

    count: int
    remaining: int
    #: -1: this cost never fits this limit.
    retry_after_ms: int
    reset_after_ms: int


Key = Union[str, bytes]


@dataclass(frozen=True)
class Result:
    """One reply, typed. ``limit`` is the index of the binding limit (0 with a single limit)."""

    allowed: bool
    count: int
    remaining: int
    #: ms until a request of the same cost would be admitted; -1 if it never can be (cost > max).
    retry_after_ms: int
    #: ms until the binding limit's window is empty.
    reset_after_ms: int
    limit: int
    #: With ``detail=True``: every limit's state, in limit order (for several keys, the order of
    #: the limits sent, key by key).
    states: Optional[Tuple[LimitState, ...]] = field(default=None, kw_only=True)
    #: With ``detail=True``: the ``now`` the call used (the server's clock for ``*``), Unix ms.
    now: Optional[int] = field(default=None, kw_only=True)
    #: With ``on_error="open"``: the failure that let this request through unchecked; else None.
    error: Optional[Exception] = field(default=None, kw_only=True, compare=False)
    #: With ``confirm``: whether the replicas acknowledged an admitted call (None otherwise).
    confirmed: Optional[bool] = field(default=None, kw_only=True)

    @classmethod
    def from_reply(cls, reply: Sequence) -> "Result":
        allowed, count, remaining, retry, reset = (int(v) for v in reply[:5])
        binding = int(reply[5]) if len(reply) > 5 else 0
        states = now = None
        if len(reply) > 7:
            states = tuple(LimitState(*(int(v) for v in s)) for s in reply[6])
            now = int(reply[7])
        return cls(allowed == 1, count, remaining, retry, reset, binding, states=states, now=now)


@dataclass(frozen=True)
class AllResult(Result):
    """An ``allow_all`` / ``peek_all`` reply: ``limit`` is the binding limit's position among all
    the limits sent (key by key, in order); ``binding_key`` and ``binding_limit`` name it."""

    binding_key: Key
    binding_limit: Limit


class TopEntry(NamedTuple):
    """One key of ``SlidingWindow.top``: ``refused`` is never below the key's true refusals since
    the servers' last ``SLIDINGWINDOW.TOPRESET`` and never above it by more than ``error``."""

    key: bytes
    refused: int
    error: int


class SlidingWindowError(Exception):
    """The helper's own errors (a Redis error reply about the call itself stays a
    ``redis.ResponseError``, with the module's exact text)."""


class UnavailableError(SlidingWindowError):
    """Redis did not decide: unreachable, no reply within the helper's timeout, or an error reply
    about the server's state (READONLY, LOADING, OOM, MASTERDOWN, ...). The cause is chained
    (``__cause__``)."""
