"""HTTP glue: the rate-limit headers of a result, byte for byte as services/gateway sends
them (IETF httpapi RateLimit draft syntax), and a client address as one key."""

from __future__ import annotations

import ipaddress
from typing import Dict, List, Optional, Sequence

from .protocol import KeyedLimits, Limits, keyed_pairs, limit_list
from .results import Limit, Result


def seconds_up(ms: int) -> int:
    """ms in whole seconds, rounded up (a client that waits that long is admitted); 0 for ms <= 0."""
    return 0 if ms <= 0 else -(-ms // 1000)


def flat_limits(limits) -> List[Limit]:
    """The limits of a call in the order the reply numbers them: ``allow``'s limits, or
    ``allow_all``'s ``{key: limits}`` key by key."""
    if isinstance(limits, dict) or (isinstance(limits, list) and limits and _is_pair(limits[0])):
        return [l for _, listed in keyed_pairs(limits) for l in limit_list(listed)]
    return limit_list(limits)


def _is_pair(item) -> bool:
    return isinstance(item, tuple) and len(item) == 2 and isinstance(item[0], (str, bytes))


def names_of(count: int, names: Optional[Sequence[str]]) -> Sequence[str]:
    """The given names, or the gateway's: ``l0``, ``l1``, ..."""
    return names if names is not None else [f"l{i}" for i in range(count)]


def _quoted(name: str) -> str:
    """``name`` as a structured-field string, as the gateway writes it: printable ASCII, ``"`` and
    ``\\`` escaped, any other character as ``_``."""
    body = "".join("\\" + c if c in '"\\' else c if " " <= c <= "~" else "_" for c in name)
    return f'"{body}"'


def policy_header(limits: "Limits | KeyedLimits", names: Optional[Sequence[str]] = None) -> str:
    """``RateLimit-Policy``: every limit by name, ``"l0";q=10;w=1,"l1";q=100;w=60``."""
    listed = flat_limits(limits)
    named = names_of(len(listed), names)
    return ",".join(f"{_quoted(named[i])};q={l.max};w={l.window}" for i, l in enumerate(listed))


def ratelimit_header(result: Result, names: Optional[Sequence[str]] = None) -> str:
    """``RateLimit`` for the binding limit: its name, remaining requests and the seconds (rounded
    up) until its window is empty, ``"l1";r=37;t=58``."""
    name = names[result.limit] if names is not None else f"l{result.limit}"
    return f"{_quoted(name)};r={result.remaining};t={seconds_up(result.reset_after_ms)}"


def retry_after_header(result: Result) -> Optional[str]:
    """``Retry-After`` in whole seconds, rounded up; None when no wait admits the request (-1)."""
    return None if result.retry_after_ms < 0 else str(seconds_up(result.retry_after_ms))


def headers(result: Result, limits: "Limits | KeyedLimits", names: Optional[Sequence[str]] = None) -> Dict[str, str]:
    """What the gateway sends with a result: ``RateLimit-Policy`` and ``RateLimit`` on every
    checked answer, ``Retry-After`` too on a refusal (429); none for a request let through
    unchecked (``on_error="open"``)."""
    if result.error is not None:
        return {}
    out = {"RateLimit-Policy": policy_header(limits, names), "RateLimit": ratelimit_header(result, names)}
    if not result.allowed:
        retry = retry_after_header(result)
        if retry is not None:
            out["Retry-After"] = retry
    return out


def canonical_ip(address: str) -> str:
    """A client address as one key: an IPv4 client of a dual-stack socket (``::ffff:a.b.c.d``, in
    any spelling: ``::ffff:7f00:1``, expanded, uppercase) is ``a.b.c.d``, IPv6 addresses in their
    compressed lowercase form; anything that is not an address is returned as is."""
    try:
        ip = ipaddress.ip_address(address)
    except ValueError:
        return address
    if isinstance(ip, ipaddress.IPv6Address) and ip.ipv4_mapped is not None:
        return str(ip.ipv4_mapped)
    return str(ip)
