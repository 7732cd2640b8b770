"""Sliding-window rate limits on Redis: SLIDINGWINDOW.ALLOW / PEEK / ALLOWALL / PEEKALL / REFUND
where the module is loaded, the same contract in a Lua script (EVALSHA) where it is not, with
identical replies and keys."""

from __future__ import annotations

import secrets
from dataclasses import dataclass
from importlib import resources
from typing import Any, Iterable, List, Mapping, NamedTuple, Optional, Sequence, Tuple, Union

import redis

__all__ = ["AllResult", "Limit", "Result", "SlidingWindow", "SCRIPT"]

CROCKFORD = "0123456789ABCDEFGHJKMNPQRSTVWXYZ"

#: The Lua rendering of the contract (clients/lua/slidingwindow.lua in the repository).
SCRIPT: str = resources.files(__name__).joinpath("slidingwindow.lua").read_text(encoding="utf-8")


class Limit(NamedTuple):
    """At most ``max`` requests (weighted by cost) in any ``window`` seconds."""

    window: int
    max: int


LimitLike = Union[Limit, Tuple[int, int]]
Key = Union[str, bytes]
#: ALLOWALL's keys with their limits: a mapping ``{key: limits}`` or ``(key, limits)`` pairs, in order.
KeyedLimits = Union[Mapping[Key, Union[LimitLike, Iterable[LimitLike]]], Iterable[Tuple[Key, Union[LimitLike, Iterable[LimitLike]]]]]


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


@dataclass(frozen=True)
class AllResult(Result):
    """An ``allow_all`` / ``peek_all`` reply: ``limit`` is the binding limit's position among all
    the limits sent (key by key, in order); ``binding_key`` and ``binding_limit`` name it."""

    binding_key: Key
    binding_limit: Limit


class SlidingWindow:
    """Rate limits over one redis-py client (``redis.Redis`` or ``redis.RedisCluster``).

    ``use="auto"`` asks the server once (``COMMAND INFO slidingwindow.allow``) whether the module
    is loaded and caches the answer; ``"module"`` or ``"lua"`` force a path (a forced module path
    never falls back to the script).
    """

    def __init__(self, client: Any, use: str = "auto") -> None:
        if use not in ("auto", "module", "lua"):
            raise ValueError("use must be 'auto', 'module' or 'lua'")
        self._client = client
        self._module: Optional[bool] = None if use == "auto" else use == "module"
        self._auto = use == "auto"
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

    def allow_all(self, limits: KeyedLimits, cost: int = 1, now: Optional[int] = None) -> AllResult:
        """Admits the request if it fits every limit of every key, and then logs it on every key
        (all or nothing, one atomic call). ``limits``: ``{key: limits}`` or ``(key, limits)`` pairs."""
        return self._all("allowall", limits, cost, now)

    def peek_all(self, limits: KeyedLimits, cost: int = 1, now: Optional[int] = None) -> AllResult:
        """What ``allow_all`` would answer now, changing nothing."""
        return self._all("peekall", limits, cost, now)

    def refund(self, key: Key, n: int = 1, at: Union[int, str, None] = None) -> int:
        """Takes back up to ``n`` logged requests (the newest scored at or before ``at``: pass the
        ``now`` the request was admitted with; None: the newest whatever their score, ``"*"``: the
        server's clock). Answers how many were removed."""
        args: List[Any] = [n] + ([] if at is None else ["AT", at])
        return int(self.call("refund", key, args))

    def _all(self, command: str, limits: KeyedLimits, cost: int, now: Optional[int]) -> AllResult:
        pairs = list(limits.items()) if isinstance(limits, Mapping) else list(limits)
        if not pairs:
            raise ValueError("at least one key is needed")
        keys = [key for key, _ in pairs]
        args: List[Any] = [len(keys), *keys, "*" if now is None else now]
        if cost != 1:
            args += ["COST", cost]
        named: List[Tuple[Key, Limit]] = []
        for keyno, (key, listed) in enumerate(pairs, 1):
            for l in _limit_list(listed):
                named.append((key, l))
                args += ["LIMIT", keyno, l.window, l.max]
        base = Result.from_reply(self.call_keys(command, args))
        key, limit = named[base.limit]
        return AllResult(**base.__dict__, binding_key=key, binding_limit=limit)

    def call(self, command: str, key: Key, args: Sequence[Any]) -> Any:
        """The raw reply of SLIDINGWINDOW.<command> key args..., on whichever path is in use."""
        return self._send(command, [key], [key, *args], list(args))

    def call_keys(self, command: str, args: Sequence[Any]) -> Any:
        """The raw reply of SLIDINGWINDOW.ALLOWALL|PEEKALL numkeys key... rest..., on either path."""
        keys: List[Any] = []
        rest = list(args)
        numkeys = _count(args[0]) if args else None
        # The script gets the keys as KEYS; a call without that many keys and a now gets none,
        # and the script answers the module's error.
        if numkeys is not None and 1 <= numkeys <= 16 and len(args) >= numkeys + 2:
            keys = list(args[1 : numkeys + 1])
            rest = [args[0], *args[numkeys + 1 :]]
        return self._send(command, keys, list(args), rest)

    def _send(self, command: str, keys: List[Any], argv: List[Any], rest: List[Any]) -> Any:
        if self.uses_module:
            options = {}
            if keys and hasattr(self._client, "get_node_from_key"):
                # RedisCluster would ask a node where a module command's keys are (COMMAND GETKEYS)
                # on every call: they are known here.
                options["target_nodes"] = self._client.get_node_from_key(keys[0])
            try:
                return self._client.execute_command(f"SLIDINGWINDOW.{command.upper()}", *argv, **options)
            except redis.ResponseError as e:
                # The module was unloaded (or this is a new server behind the same address).
                if not self._auto or not str(e).lower().startswith("unknown command"):
                    raise
                self._module = False
        entropy = "".join(secrets.choice(CROCKFORD) for _ in range(16))
        return self._script(keys=keys, args=[command.lower(), entropy, *rest])


def arguments(limits: Union[LimitLike, Iterable[LimitLike]], cost: int, now: Optional[int]) -> List[Any]:
    """``window max now [COST n] [LIMIT window max]...`` for a list of limits (the first is positional)."""
    first, *rest = _limit_list(limits)
    args: List[Any] = [first.window, first.max, "*" if now is None else now]
    if cost != 1:
        args += ["COST", cost]
    for l in rest:
        args += ["LIMIT", l.window, l.max]
    return args


def _limit_list(limits: Union[LimitLike, Iterable[LimitLike]]) -> List[Limit]:
    """One limit or several, as a list of ``Limit``."""
    if isinstance(limits, tuple) and len(limits) == 2 and not isinstance(limits[0], tuple):
        limits = [limits]
    listed = [Limit(*l) for l in limits]
    if not listed:
        raise ValueError("at least one limit is needed")
    return listed


def _count(word: Any) -> Optional[int]:
    """``numkeys`` as the server would read it (plain decimal digits), or None."""
    text = word.decode("latin-1") if isinstance(word, bytes) else str(word)
    return int(text) if text.isascii() and text.isdigit() and len(text) < 20 else None


def _command_present(info: Any) -> bool:
    # One entry per name asked: nil for an unknown command, its description otherwise.
    if isinstance(info, dict):
        return any(v for v in info.values())
    return any(v for v in info or [])
