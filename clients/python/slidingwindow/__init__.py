"""Sliding-window rate limits on Redis: SLIDINGWINDOW.ALLOW / PEEK where the module is loaded,
the same contract in a Lua script (EVALSHA) where it is not, with identical replies and keys."""

from __future__ import annotations

import secrets
from dataclasses import dataclass
from importlib import resources
from typing import Any, Iterable, List, NamedTuple, Optional, Sequence, Tuple, Union

import redis

__all__ = ["Limit", "Result", "SlidingWindow", "SCRIPT"]

CROCKFORD = "0123456789ABCDEFGHJKMNPQRSTVWXYZ"

#: The Lua rendering of the contract (clients/lua/slidingwindow.lua in the repository).
SCRIPT: str = resources.files(__name__).joinpath("slidingwindow.lua").read_text(encoding="utf-8")


class Limit(NamedTuple):
    """At most ``max`` requests (weighted by cost) in any ``window`` seconds."""

    window: int
    max: int


LimitLike = Union[Limit, Tuple[int, int]]


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

    @classmethod
    def from_reply(cls, reply: Sequence[int]) -> "Result":
        allowed, count, remaining, retry, reset = (int(v) for v in reply[:5])
        binding = int(reply[5]) if len(reply) > 5 else 0
        return cls(allowed == 1, count, remaining, retry, reset, binding)


class SlidingWindow:
    """Rate limits over one redis-py client (``redis.Redis`` or ``redis.RedisCluster``).

    ``use="auto"`` asks the server once (``COMMAND INFO slidingwindow.allow``) whether the module
    is loaded and caches the answer; ``"module"`` or ``"lua"`` force a path.
    """

    def __init__(self, client: Any, use: str = "auto") -> None:
        if use not in ("auto", "module", "lua"):
            raise ValueError("use must be 'auto', 'module' or 'lua'")
        self._client = client
        self._module: Optional[bool] = None if use == "auto" else use == "module"
        self._script = client.register_script(SCRIPT)

    @property
    def uses_module(self) -> bool:
        if self._module is None:
            # "COMMAND INFO" as one name: redis-py's parser for "COMMAND" fails on an unknown command's nil.
            options = {}
            if hasattr(self._client, "get_default_node"):  # RedisCluster: any node knows the modules
                options["target_nodes"] = self._client.get_default_node()
            info = self._client.execute_command("COMMAND INFO", "slidingwindow.allow", **options)
            self._module = _command_present(info)
        return self._module

    def allow(
        self,
        key: Union[str, bytes],
        limits: Union[LimitLike, Iterable[LimitLike]],
        cost: int = 1,
        now: Optional[int] = None,
    ) -> Result:
        """Admits the request if it fits every limit (and logs it); ``now`` in Unix ms, None = server clock."""
        return Result.from_reply(self.call("allow", key, arguments(limits, cost, now)))

    def peek(
        self,
        key: Union[str, bytes],
        limits: Union[LimitLike, Iterable[LimitLike]],
        cost: int = 1,
        now: Optional[int] = None,
    ) -> Result:
        """What ``allow`` would answer now, changing nothing."""
        return Result.from_reply(self.call("peek", key, arguments(limits, cost, now)))

    def call(self, command: str, key: Union[str, bytes], args: Sequence[Any]) -> List[int]:
        """The raw reply of SLIDINGWINDOW.<command> key args..., on whichever path is in use."""
        if self.uses_module:
            try:
                return self._client.execute_command(f"SLIDINGWINDOW.{command.upper()}", key, *args)
            except redis.ResponseError as e:
                # The module was unloaded (or this is a new server behind the same address).
                if not str(e).lower().startswith("unknown command"):
                    raise
                self._module = False
        entropy = "".join(secrets.choice(CROCKFORD) for _ in range(16))
        return self._script(keys=[key], args=[command.lower(), entropy, *args])


def arguments(limits: Union[LimitLike, Iterable[LimitLike]], cost: int, now: Optional[int]) -> List[Any]:
    """``window max now [COST n] [LIMIT window max]...`` for a list of limits (the first is positional)."""
    if isinstance(limits, tuple) and len(limits) == 2 and not isinstance(limits[0], tuple):
        limits = [limits]
    listed = [Limit(*l) for l in limits]
    if not listed:
        raise ValueError("at least one limit is needed")
    first, rest = listed[0], listed[1:]
    args: List[Any] = [first.window, first.max, "*" if now is None else now]
    if cost != 1:
        args += ["COST", cost]
    for l in rest:
        args += ["LIMIT", l.window, l.max]
    return args


def _command_present(info: Any) -> bool:
    # One entry per name asked: nil for an unknown command, its description otherwise.
    if isinstance(info, dict):
        return any(v for v in info.values())
    return any(v for v in info or [])
