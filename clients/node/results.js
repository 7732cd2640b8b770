'use strict';
// The typed result of a reply, and the helper's own errors.

/**
 * Turns the reply's integers into the typed result; `limit` is the binding limit's index. A reply
 * with DETAIL adds `states` (every limit's count, remaining, retryAfterMs, resetAfterMs, in limit
 * order) and `now` (the ms the call used: the server's clock for '*').
 */
function toResult(reply) {
  const result = {
    allowed: reply[0] === 1,
    count: reply[1],
    remaining: reply[2],
    retryAfterMs: reply[3],
    resetAfterMs: reply[4],
    limit: reply.length > 5 ? reply[5] : 0,
  };
  if (reply.length > 7) {
    result.states = reply[6].map(([count, remaining, retryAfterMs, resetAfterMs]) => ({ count, remaining, retryAfterMs, resetAfterMs }));
    result.now = reply[7];
  }
  return result;
}

/** The helper's own errors (an error reply about the call itself stays ioredis's ReplyError). */
class SlidingWindowError extends Error {
  constructor(message, options) {
    super(message, options);
    this.name = this.constructor.name;
  }
}

/**
 * Redis did not decide: unreachable, no reply within the helper's timeout, or an error reply about
 * the server's state (READONLY, LOADING, OOM, MASTERDOWN, ...). `cause` holds the failure.
 */
class UnavailableError extends SlidingWindowError {}

// Error replies about the server's state rather than the call: the on_error policy's, not the caller's.
const STATE_CODES = new Set(['READONLY', 'OOM', 'LOADING', 'MASTERDOWN', 'TRYAGAIN', 'CLUSTERDOWN', 'BUSY', 'MISCONF', 'NOREPLICAS']);

/** Whether a failure means Redis did not decide (rather than refusing the call's arguments). */
function unavailable(err) {
  if (err instanceof UnavailableError) return true;
  if (err?.name !== 'ReplyError') return true;
  return STATE_CODES.has(String(err.message).split(' ', 1)[0]);
}


module.exports = { toResult, SlidingWindowError, UnavailableError, unavailable };
