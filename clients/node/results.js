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

/** The helper's own errors (an error reply about the call itself stays the client's: ioredis's ReplyError, node-redis's ErrorReply). */
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

module.exports = { toResult, SlidingWindowError, UnavailableError };
