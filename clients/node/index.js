'use strict';
// Sliding-window rate limits on Redis: SLIDINGWINDOW.ALLOW / PEEK / ALLOWALL / PEEKALL / REFUND where
// the module is loaded, the same contract in a Lua script (EVALSHA) where it is not, with identical
// replies and keys; leases, a call timeout, fail-open or -closed, WAIT after admissions, and the
// HTTP headers; over ioredis or node-redis. limiter.js holds the client, connections.js the Redis
// clients it takes, lease.js the lease object, inflight.js slots and reservations, headers.js the
// HTTP headers and client addresses, arguments.js the commands' arguments, results.js the typed
// results and errors.

const { SlidingWindow, SCRIPT, CROCKFORD } = require('./limiter');
const { Lease } = require('./lease');
const { Slot, Reservation } = require('./inflight');
const { SlidingWindowError, UnavailableError, toResult } = require('./results');
const { toArgs, toKeyArgs } = require('./arguments');
const { headers, policyHeader, rateLimitHeader, retryAfterHeader, secondsUp, canonicalIp } = require('./headers');

module.exports = {
  SlidingWindow, Lease, Slot, Reservation, SlidingWindowError, UnavailableError, SCRIPT, CROCKFORD, canonicalIp, toArgs, toKeyArgs, toResult,
  headers, policyHeader, rateLimitHeader, retryAfterHeader, secondsUp,
};
