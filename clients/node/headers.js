'use strict';
// The rate-limit headers of a result, byte for byte as services/gateway sends them (IETF
// httpapi RateLimit draft syntax), and a client address as one key.

const net = require('node:net');
const { toLimits, toPairs } = require('./arguments');

/** ms in whole seconds, rounded up (a client that waits that long is admitted); 0 for ms <= 0. */
function secondsUp(ms) {
  return ms <= 0 ? 0 : Math.floor(ms / 1000) + (ms % 1000 === 0 ? 0 : 1);
}

/** The limits of a call in the order the reply numbers them: allow's, or allowAll's key by key. */
function flatLimits(limits) {
  const keyed = limits instanceof Map
    || (Array.isArray(limits) && limits.length > 0 && ((Array.isArray(limits[0]) && typeof limits[0][0] === 'string') || limits[0]?.key !== undefined));
  return keyed ? toPairs(limits).flatMap(([, l]) => toLimits(l)) : toLimits(limits);
}

/** A limit's name as a structured-field string, as the gateway writes it: printable ASCII, `"` and `\` escaped, any other character as `_`. */
const nameOf = (names, i) => {
  const name = names ? names[i] : `l${i}`;
  return `"${[...name].map((c) => ('"\\'.includes(c) ? `\\${c}` : c >= ' ' && c <= '~' ? c : '_')).join('')}"`;
};

/** RateLimit-Policy: every limit by name, `"l0";q=10;w=1,"l1";q=100;w=60` (names default l0, l1, ...). */
function policyHeader(limits, names) {
  return flatLimits(limits).map((l, i) => `${nameOf(names, i)};q=${l.max};w=${l.window}`).join(',');
}

/** RateLimit for the binding limit: name, remaining, seconds until its window is empty, `"l1";r=37;t=58`. */
function rateLimitHeader(result, names) {
  return `${nameOf(names, result.limit)};r=${result.remaining};t=${secondsUp(result.resetAfterMs)}`;
}

/** Retry-After in whole seconds, rounded up; null when no wait admits the request (-1). */
function retryAfterHeader(result) {
  return result.retryAfterMs < 0 ? null : String(secondsUp(result.retryAfterMs));
}

/**
 * What the gateway sends with a result: RateLimit-Policy and RateLimit on every checked answer,
 * Retry-After too on a refusal (429); none for a request let through unchecked (onError 'open').
 */
function headers(result, limits, names) {
  if (result.error !== undefined) return {};
  const out = { 'RateLimit-Policy': policyHeader(limits, names), RateLimit: rateLimitHeader(result, names) };
  const retry = result.allowed ? null : retryAfterHeader(result);
  if (retry !== null) out['Retry-After'] = retry;
  return out;
}

/**
 * A client address as one key: an IPv4 client on a dual-stack socket shows as `::ffff:a.b.c.d`
 * (Express's `req.ip`), or in any other spelling of it (`::ffff:7f00:1`, expanded, uppercase), and
 * gets the quota of `a.b.c.d`; other IPv6 addresses come in their compressed lowercase form.
 * Anything that is not an IPv6 address is returned as is.
 */
function canonicalIp(address) {
  if (typeof address !== 'string' || !net.isIPv6(address)) return address;
  let host;
  try {
    // The URL parser writes IPv6 in its one canonical form (RFC 5952), the mapped part in hex.
    host = new URL(`http://[${address}]/`).hostname.slice(1, -1);
  } catch {
    return address; // a zone index (fe80::1%eth0)
  }
  const mapped = /^::ffff:([0-9a-f]{1,4}):([0-9a-f]{1,4})$/.exec(host);
  if (!mapped) return host;
  const [hi, lo] = [parseInt(mapped[1], 16), parseInt(mapped[2], 16)];
  return `${hi >> 8}.${hi & 255}.${lo >> 8}.${lo & 255}`;
}

module.exports = { headers, policyHeader, rateLimitHeader, retryAfterHeader, secondsUp, canonicalIp };
