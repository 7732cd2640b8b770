'use strict';
// The commands' arguments: limits, keys with their limits, and the options, as the module and the
// script take them.

// 2^53, the largest time (ms) and count the commands take.
const MAX_EXACT = 2 ** 53;

/** One limit or a list of them, each {window, max} or [window, max], as a list of {window, max}. */
function toLimits(limits) {
  const one = !Array.isArray(limits) || (limits.length === 2 && !Array.isArray(limits[0]) && typeof limits[0] !== 'object');
  const list = (one ? [limits] : limits).map((l) => (Array.isArray(l) ? { window: l[0], max: l[1] } : { window: l.window, max: l.max }));
  if (list.length === 0) throw new TypeError('at least one limit is needed');
  return list;
}

const nowArg = (now) => (now === undefined || now === null ? '*' : now);

const given = (v) => v !== undefined && v !== null;

/** `[LEASE ms] [PRECISION p] [DETAIL]`; a precision the commands cannot take throws a TypeError. */
function options({ lease, precision, detail } = {}) {
  if (given(precision) && !(Number.isInteger(precision) && precision >= 1 && precision <= MAX_EXACT)) {
    throw new TypeError(`precision must be an integer between 1 and ${MAX_EXACT} (ms), not ${precision}`);
  }
  return [...(given(lease) ? ['LEASE', lease] : []), ...(given(precision) ? ['PRECISION', precision] : []), ...(detail ? ['DETAIL'] : [])];
}

/**
 * The score an admitted call's members were logged at: now + lease rounded up to a multiple of
 * the precision (what REFUND key n AT score takes back).
 */
function scoreOf(now, lease, precision) {
  const s = now + (lease ?? 0);
  const p = precision ?? 1;
  // Whole numbers up to 2^53: % is exact where s / p would round.
  const r = s % p;
  return r === 0 ? s : s - r + p;
}

/**
 * `window max now [COST n] [LIMIT window max]... [LEASE ms] [PRECISION p] [DETAIL]`; limits are
 * {window, max} or [window, max].
 */
function toArgs(limits, cost = 1, now = undefined, opts = {}) {
  const list = toLimits(limits);
  const args = [list[0].window, list[0].max, nowArg(now)];
  if (cost !== 1) args.push('COST', cost);
  for (const l of list.slice(1)) args.push('LIMIT', l.window, l.max);
  return [...args, ...options(opts)];
}

/** Keys with their limits (a Map, or a list of [key, limits] or {key, limits}) as [key, limits] pairs. */
function toPairs(keyed) {
  return (keyed instanceof Map ? [...keyed] : keyed).map((p) => (Array.isArray(p) ? p : [p.key, p.limits]));
}

/**
 * ALLOWALL's `numkeys key... now [COST n] LIMIT keyno window max...` for keys with their limits: a
 * Map, or a list of [key, limits] or {key, limits}, in order. `named[i]` is LIMIT option i's key and limit.
 */
function toKeyArgs(keyed, cost = 1, now = undefined, opts = {}) {
  const pairs = toPairs(keyed);
  if (pairs.length === 0) throw new TypeError('at least one key is needed');
  const args = [pairs.length, ...pairs.map(([key]) => key), nowArg(now)];
  if (cost !== 1) args.push('COST', cost);
  const named = [];
  pairs.forEach(([key, limits], i) => {
    for (const l of toLimits(limits)) {
      named.push({ key, limit: l });
      args.push('LIMIT', i + 1, l.window, l.max);
    }
  });
  args.push(...options(opts));
  return { args, named };
}

module.exports = { MAX_EXACT, given, toLimits, toPairs, toArgs, toKeyArgs, scoreOf };
