'use strict';
// Sliding-window rate limits on Redis: SLIDINGWINDOW.ALLOW / PEEK / ALLOWALL / PEEKALL / REFUND where
// the module is loaded, the same contract in a Lua script (EVALSHA) where it is not, with identical
// replies and keys; leases, a call timeout, fail-open or -closed, WAIT after admissions, and the
// HTTP headers.

const crypto = require('node:crypto');
const fs = require('node:fs');
const net = require('node:net');
const path = require('node:path');
const { Slot, Reservation } = require('./inflight');

const CROCKFORD = '0123456789ABCDEFGHJKMNPQRSTVWXYZ';
// clients/lua/slidingwindow.lua in the repository (this folder holds a link to it).
const SCRIPT = fs.readFileSync(path.join(__dirname, 'slidingwindow.lua'), 'utf8');
const SHA = crypto.createHash('sha1').update(SCRIPT).digest('hex');

const MAX_LATENESS = 86_400_000;
// 2^53, the largest time (ms) and count the commands take.
const MAX_EXACT = 2 ** 53;

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

/**
 * The Command class of the client's own ioredis (a linked copy of this folder cannot require the
 * app's): `call` run on a stand-in whose sendCommand keeps the command it is given, sending nothing.
 */
function commandClass(redis) {
  let found = null;
  const probe = Object.create(redis, {
    options: { value: { ...redis.options, enableAutoPipelining: false } },
    sendCommand: {
      value: (command) => {
        found = command.constructor;
        return Promise.resolve();
      },
    },
  });
  redis.call.call(probe, 'PING');
  return found;
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

function entropy() {
  const bytes = crypto.randomBytes(16);
  let out = '';
  for (const b of bytes) out += CROCKFORD[b & 31];
  return out;
}

class SlidingWindow {
  /**
   * @param redis an ioredis client (Redis, one with Sentinel options, or Cluster)
   * @param options.use 'auto' (ask the server once with COMMAND INFO, then cache), 'module' or 'lua'
   *   (a forced module path never falls back to the script)
   * @param options.lateness ms the Lua path passes as the script's lateness (the module path reads
   *   the server's slidingwindow.lateness); keep it equal to the servers' when both paths are used
   * @param options.timeout ms a call waits for its reply (default 1000; 0: without bound)
   * @param options.onError when Redis does not decide: 'closed' rejects with UnavailableError,
   *   'open' resolves to an admitted result whose `error` holds it
   * @param options.confirm { replicas, timeoutMs }: WAIT after each admitted allow / allowAll, on the
   *   same connection; when fewer replicas acknowledged, options.onUnconfirmed 'deny' (default)
   *   takes the charge back and answers refused, 'allow' answers admitted; `confirmed` says which
   */
  constructor(redis, { use = 'auto', lateness = 0, timeout = 1000, onError = 'closed', confirm, onUnconfirmed = 'deny' } = {}) {
    if (!['auto', 'module', 'lua'].includes(use)) throw new TypeError("use must be 'auto', 'module' or 'lua'");
    if (!Number.isInteger(lateness) || lateness < 0 || lateness > MAX_LATENESS) throw new TypeError(`lateness must be an integer between 0 and ${MAX_LATENESS} (ms)`);
    if (!(Number.isFinite(timeout) && timeout >= 0)) throw new TypeError('timeout must be a number of ms >= 0');
    if (!['open', 'closed'].includes(onError)) throw new TypeError("onError must be 'open' or 'closed'");
    if (!['allow', 'deny'].includes(onUnconfirmed)) throw new TypeError("onUnconfirmed must be 'allow' or 'deny'");
    if (confirm !== undefined) {
      const { replicas, timeoutMs } = confirm;
      if (!(Number.isInteger(replicas) && replicas >= 1 && Number.isInteger(timeoutMs) && timeoutMs >= 0)) {
        throw new TypeError('confirm must be { replicas >= 1, timeoutMs >= 0 }');
      }
      if (redis.isCluster) throw new TypeError('confirm needs one master (Redis, or Redis with Sentinel options), not a Cluster');
    }
    this.redis = redis;
    this.module = use === 'auto' ? null : Promise.resolve(use === 'module');
    this.auto = use === 'auto';
    this.scriptWord = lateness === 0 ? '' : ` lateness ${lateness}`;
    this.timeout = timeout;
    this.onError = onError;
    this.confirm = confirm;
    this.onUnconfirmed = onUnconfirmed;
    // ioredis reports a lost connection as an 'error' event, and prints "Unhandled error event"
    // when nobody listens: the helper listens, and its calls reject with the failure as the cause.
    this.lastError = null;
    redis.on('error', (err) => {
      this.lastError = err;
    });
  }

  /** Whether calls go to the module (true) or the script (false). */
  usesModule() {
    if (this.module === null) {
      // Concurrent first calls share one question; a failed one is asked again next time.
      this.module = this.#send(['COMMAND', 'INFO', 'slidingwindow.allow'], []).then(
        (info) => Array.isArray(info) && info.some((entry) => entry),
        (err) => {
          this.module = null;
          throw err;
        },
      );
    }
    return this.module;
  }

  /**
   * Admits the request if it fits every limit (and logs it); `now` in Unix ms, default the server
   * clock. `lease` (ms) logs an admitted call's members at now + ms (see `lease()`); `precision`
   * (ms) logs them at that time rounded up to a multiple of it (a key then holds a bounded number
   * of distinct times, whatever the rate); `detail` adds every limit's state and the `now` used.
   */
  async allow(key, limits, { cost = 1, now, lease, precision, detail = false } = {}) {
    const args = toArgs(limits, cost, now, { lease, precision, detail: detail || this.confirm !== undefined });
    return this.#decide('allow', [key], [key, ...args], args, { cost, lease, precision, detail }, toResult, { key: undefined });
  }

  /** What `allow` would answer now, changing nothing. */
  async peek(key, limits, { cost = 1, now, lease, precision, detail = false } = {}) {
    const args = toArgs(limits, cost, now, { lease, precision, detail });
    return this.#decide('peek', [key], [key, ...args], args, { cost, lease, precision, detail }, toResult, { key: undefined });
  }

  /**
   * Admits the request if it fits every limit of every key, and then logs it on every key (all or
   * nothing, one atomic call). `keyed`: a Map of key to limits, or a list of [key, limits] or
   * {key, limits}. The result names the binding limit: `bindingKey` and `bindingLimit`.
   */
  async allowAll(keyed, { cost = 1, now, lease, precision, detail = false } = {}) {
    return this.#all('allowall', keyed, { cost, now, lease, precision, detail });
  }

  /** What `allowAll` would answer now, changing nothing. */
  async peekAll(keyed, { cost = 1, now, lease, precision, detail = false } = {}) {
    return this.#all('peekall', keyed, { cost, now, lease, precision, detail });
  }

  /**
   * Takes back up to `n` logged requests: the newest scored at or before `at` (pass the `now` the
   * request was admitted with; '*' is the server's clock), or the newest whatever their score when
   * `at` is undefined. Resolves to how many were removed; rejects with UnavailableError when Redis
   * does not answer.
   */
  async refund(key, n = 1, { at } = {}) {
    return this.call('refund', key, at === undefined || at === null ? [n] : [n, 'AT', at]);
  }

  /**
   * A slot among `limit` in flight on `key`, held at most `hold` seconds (the longest a request
   * may take): `release()` gives it back, a holder that dies frees it when `hold` passes. Never
   * more than `limit` in flight.
   */
  async acquire(key, limit, hold) {
    return new Slot(this, key, await this.allow(key, { window: hold, max: limit }, { detail: true }));
  }

  /**
   * `n` requests charged now for a cost known only later (tokens of a response): `settle(used)`
   * refunds what was not used or charges the excess (an overrun when it does not fit, reported,
   * never hidden); `cancel()` refunds all.
   */
  async reserve(key, limits, n) {
    return new Reservation(this, key, limits, n, await this.allow(key, limits, { cost: n, detail: true }));
  }

  /**
   * A Lease: permits for one key and its limits, `size` at a time for `durationMs`, handed out from
   * memory; `clock` (a function answering Unix ms), when given, is the time its calls pass as now.
   */
  lease(key, limits, { size, durationMs, clock } = {}) {
    return new Lease(this, key, limits, { size, durationMs, clock });
  }

  async #all(command, keyed, { cost, now, lease, precision, detail }) {
    const { args, named } = toKeyArgs(keyed, cost, now, { lease, precision, detail: detail || (command === 'allowall' && this.confirm !== undefined) });
    const keys = args.slice(1, Number(args[0]) + 1);
    const typed = (reply) => {
      const result = toResult(reply);
      const { key, limit } = named[result.limit];
      return { ...result, bindingKey: key, bindingLimit: limit };
    };
    const rest = [args[0], ...args.slice(keys.length + 1)];
    return this.#decide(command, keys, args, rest, { cost, lease, precision, detail }, typed, { bindingKey: named[0].key, bindingLimit: named[0].limit });
  }

  /**
   * One typed call: the command, then with `confirm` the WAIT (and the refund it may need) on the
   * same connection; the onError policy when Redis does not decide.
   */
  async #decide(command, keys, argv, rest, { cost, lease, precision, detail }, typed, unchecked) {
    try {
      let result = typed(await this.#command(command, keys, argv, rest));
      if (this.confirm !== undefined && result.allowed && (command === 'allow' || command === 'allowall')) {
        result = await this.#confirmed(keys, cost, scoreOf(result.now, lease, precision), result);
      }
      if (!detail && result.states !== undefined) {
        delete result.states;
        delete result.now;
      }
      return result;
    } catch (err) {
      if (this.onError === 'closed' || !(err instanceof UnavailableError)) throw err;
      const result = { allowed: true, count: 0, remaining: 0, retryAfterMs: 0, resetAfterMs: 0, limit: 0, error: err };
      return unchecked.bindingKey === undefined ? result : { ...result, ...unchecked };
    }
  }

  async #confirmed(keys, cost, at, result) {
    const { replicas, timeoutMs } = this.confirm;
    // WAIT counts the writes of its own connection: a reconnection in between would count none.
    const stream = this.redis.stream;
    const acked = await this.#send(['WAIT', replicas, timeoutMs], [], this.timeout === 0 ? 0 : this.timeout + timeoutMs);
    if (acked >= replicas && this.redis.stream === stream) return { ...result, confirmed: true };
    if (this.onUnconfirmed === 'allow') return { ...result, confirmed: false };
    // Taken back exactly: this call's members, at the score they were logged with.
    for (const key of keys) await this.#command('refund', [key], [key, cost, 'AT', at], [cost, 'AT', at]);
    return { ...result, allowed: false, confirmed: false };
  }

  /**
   * The raw reply of SLIDINGWINDOW.<command> key args..., on whichever path is in use. Rejects
   * with ReplyError for the call's own errors, UnavailableError when Redis does not decide.
   */
  /**
   * The keys refused most since the servers' last SLIDINGWINDOW.TOPRESET, most first (ties: the
   * smaller error, then the key), at most `count` (SLIDINGWINDOW.TOP COUNT count; at most the
   * servers' slidingwindow.top-keys), each `{ key, refused, error }`: `refused` is never below the
   * key's true refusals and never above it by more than `error`. On a Cluster every master is
   * asked and a key's counts and errors are added up. Needs the module: the script keeps no
   * summary, so on the script path it throws a SlidingWindowError.
   */
  async top(count = 10) {
    if (!Number.isSafeInteger(count) || count < 1) throw new TypeError('count must be an integer >= 1');
    if (!(await this.usesModule())) {
      throw new SlidingWindowError('top needs the module: the Lua script keeps no summary of refusals');
    }
    const ask = ['SLIDINGWINDOW.TOP', 'COUNT', count];
    const replies = this.redis.isCluster
      ? await Promise.all(this.redis.nodes('master').map((node) => this.#sendTo(node, ask)))
      : [await this.#send(ask, [])];
    const totals = new Map();
    for (const reply of replies) {
      for (const [key, refused, error] of reply) {
        const total = totals.get(key) ?? { key, refused: 0, error: 0 };
        total.refused += Number(refused);
        total.error += Number(error);
        totals.set(key, total);
      }
    }
    const byBytes = (a, b) => Buffer.compare(Buffer.from(a), Buffer.from(b));
    return [...totals.values()]
      .sort((a, b) => b.refused - a.refused || a.error - b.error || byBytes(a.key, b.key))
      .slice(0, count);
  }

  /** One command to one node of a Cluster, with the helper's timeout and errors. */
  async #sendTo(node, [name, ...args]) {
    try {
      return await withTimeout(node.call(name, ...args), this.timeout);
    } catch (err) {
      if (!unavailable(err)) throw err;
      throw new UnavailableError(`Redis did not decide: ${err.message}`, { cause: err });
    }
  }

  async call(command, key, args) {
    return this.#command(command, [key], [key, ...args], args);
  }

  /** The raw reply of SLIDINGWINDOW.ALLOWALL|PEEKALL numkeys key... rest..., on either path. */
  async callKeys(command, args) {
    // The script gets the keys as KEYS; a call without that many keys and a now gets none, and
    // the script answers the module's error.
    const numkeys = /^[0-9]{1,2}$/.test(String(args[0])) ? Number(args[0]) : 0;
    if (numkeys >= 1 && numkeys <= 16 && args.length >= numkeys + 2) {
      return this.#command(command, args.slice(1, numkeys + 1), args, [args[0], ...args.slice(numkeys + 1)]);
    }
    return this.#command(command, [], args, args);
  }

  async #command(command, keys, argv, rest) {
    if (await this.usesModule()) {
      try {
        return await this.#send([`SLIDINGWINDOW.${command.toUpperCase()}`, ...argv], keys);
      } catch (err) {
        // The module was unloaded (or a new server answers at the same address).
        if (!this.auto || !/^ERR unknown command/i.test(err.cause?.message ?? err.message)) throw err;
        this.module = Promise.resolve(false);
      }
    }
    const script = [keys.length, ...keys, command.toLowerCase() + this.scriptWord, entropy(), ...rest];
    try {
      return await this.#send(['EVALSHA', SHA, ...script], keys);
    } catch (err) {
      if (!/^NOSCRIPT/.test(err.message)) throw err;
      return this.#send(['EVAL', SCRIPT, ...script], keys);
    }
  }

  /**
   * One command with its keys named (ioredis does not know a module command's keys: named here, a
   * Cluster sends the call straight to the node of their slot) and the helper's timeout; failures
   * of Redis as UnavailableError.
   */
  async #send([name, ...args], keys, timeout = this.timeout) {
    if (this.Command === undefined) this.Command = commandClass(this.redis);
    try {
      if (this.Command === null) return await withTimeout(this.redis.call(name, ...args), timeout);
      const sent = new this.Command(name, args, { replyEncoding: 'utf8' });
      sent.keys = keys;
      if (timeout > 0) sent.setTimeout(timeout);
      return await this.redis.sendCommand(sent);
    } catch (err) {
      if (!unavailable(err)) throw err;
      // A timeout says little by itself: the connection's last error says why.
      const last = err.name !== 'ReplyError' && this.lastError !== null ? ` (the connection's last error: ${this.lastError.message})` : '';
      throw new UnavailableError(`Redis did not decide: ${err.message}${last}`, { cause: err });
    }
  }
}

function withTimeout(promise, ms) {
  if (!(ms > 0)) return promise;
  let timer;
  const late = new Promise((_, reject) => {
    timer = setTimeout(() => reject(new Error('Command timed out')), ms);
  });
  return Promise.race([promise, late]).finally(() => clearTimeout(timer));
}

/**
 * Permits for one key and its limits, `size` at a time for `durationMs`.
 *
 * `allow()` hands out a permit from memory while the lease is live and has one; otherwise it takes
 * a new lease (ALLOW key ... COST size LEASE durationMs DETAIL on the server's clock, or on
 * `clock()` when given), whose
 * members are logged at the lease's end so that no limit is ever exceeded. When a lease is refused
 * it makes one exact call per request (so that near the limit every last permit is still handed
 * out) until the refusal's wait for a whole lease has passed. Unused permits go back
 * (REFUND key unused AT now+ms) when the lease ends and on `close()`. Concurrent callers share one
 * lease call at a time.
 *
 * With `clock` (a function answering Unix ms), every call passes `now = Math.floor(clock())`, and
 * the lease's times read that clock: a lease taken at `now` is live while now <= clock < now +
 * durationMs, a refusal remembered from a PEEK sent at `sent` holds while clock < sent +
 * retryAfterMs, waits run down by the clock's ms since their call. Without it, `performance.now()`
 * times the lease and the calls pass the server's clock ('*').
 */
class Lease {
  #left = 0;
  #reply = null;
  #clock; // the caller's clock (Unix ms), or undefined: performance.now() and the server's clock
  #taken = 0; // the lease's time when its call was sent: its now on the caller's clock
  #end = 0; // from it on, no permit of the lease is handed out
  #refundAt = 0; // the lease's now + ms on the server's clock: its members' score
  // Until then the last lease reply showed no permit left and no whole lease fitting: a PEEK
  // learns the wait first.
  #fullUntil = 0;
  // A refused PEEK: its reply, when it was sent, and until when it holds.
  #refused = null;
  #refunds = 0; // bumped when one of its refunds starts and when it ends
  #calling = null; // the Redis calls of one request in flight
  #timer = null;

  constructor(sw, key, limits, { size, durationMs, clock } = {}) {
    const smallest = Math.min(...toLimits(limits).map((l) => l.max));
    if (!(Number.isInteger(size) && size >= 1 && size <= smallest)) throw new TypeError(`size must be an integer between 1 and the smallest max, ${smallest}`);
    if (!(Number.isInteger(durationMs) && durationMs >= 1)) throw new TypeError('durationMs must be an integer >= 1 (ms)');
    if (given(clock) && typeof clock !== 'function') throw new TypeError('clock must be a function answering Unix ms');
    Object.assign(this, { sw, key, limits, size, durationMs });
    this.#clock = given(clock) ? clock : undefined;
  }

  /** The lease's time: the caller's clock in whole ms, else performance.now(). */
  #time() {
    if (this.#clock === undefined) return performance.now();
    const ms = Math.floor(this.#clock());
    if (!Number.isSafeInteger(ms)) throw new TypeError(`clock must answer Unix ms, not ${ms}`);
    return ms;
  }

  /** Whether the current lease hands out permits at `t` (by the lease's time). */
  #live(t) {
    return this.#taken <= t && t < this.#end;
  }

  /** The `now` its calls pass: the caller's clock at `t`, else the server's. */
  #nowAt(t) {
    return this.#clock === undefined ? undefined : t;
  }

  /** Permits held in memory now (0 once the lease has ended). */
  get permits() {
    return this.#live(this.#time()) ? this.#left : 0;
  }

  /**
   * One request: a permit from memory or from a new lease, the answer of a call, or a refusal
   * remembered from a PEEK. One caller at a time calls Redis; the others wait for it.
   */
  async allow() {
    for (;;) {
      const t = this.#time();
      if (this.#left > 0 && this.#live(t)) {
        this.#left--;
        return this.#fromMemory(t);
      }
      if (this.#calling !== null) {
        await this.#calling;
        continue;
      }
      if (this.#refused !== null) {
        const { r, sent, until } = this.#refused;
        if (t < until) return runDown(r, t - sent);
        this.#refused = null;
      }
      let done;
      this.#calling = new Promise((resolve) => {
        done = resolve;
      });
      try {
        await this.#refund(this.#drop()).catch(() => {});
        return await this.#decide(t);
      } finally {
        this.#calling = null;
        done();
      }
    }
  }

  /** The calls of a request that found no permit: a lease, what is left, or a PEEK. */
  async #decide(t) {
    if (t < this.#fullUntil) {
      const r = await this.#peek();
      if (!r.allowed || r.error !== undefined) return r;
    }
    let r = await this.#take(this.size);
    if (r.allowed || r.error !== undefined || r.confirmed !== undefined) return r;
    const fits = Math.min(...r.states.map((s) => s.remaining));
    if (fits >= 1) {
      r = await this.#take(fits);
      if (r.allowed) return r;
    }
    r = await this.#peek();
    // Room appeared since the refused lease: a lease of one.
    if (r.allowed && r.error === undefined) r = await this.#take(1);
    return r;
  }

  /** A lease of n permits, starting when its call is sent; admitted, its first permit. */
  async #take(n) {
    const sent = this.#time();
    const r = await this.sw.allow(this.key, this.limits, { cost: n, now: this.#nowAt(sent), lease: this.durationMs, detail: true });
    if (r.error !== undefined) return r; // unchecked (onError 'open'): no lease was taken
    if (r.retryAfterMs < 0) throw new SlidingWindowError(`a lease of ${n} never fits the limits of ${this.key}`);
    const full = Math.min(...r.states.map((s) => s.remaining)) === 0;
    this.#fullUntil = full ? sent + r.retryAfterMs : 0;
    if (!r.allowed) return r;
    this.#start(sent, r, n);
    this.#left--;
    return this.#fromMemory(sent);
  }

  /** Whether one permit fits now, changing nothing: a refusal with a wait that ends is remembered. */
  async #peek() {
    const refunds = this.#refunds;
    const sent = this.#time();
    const r = await this.sw.peek(this.key, this.limits, { now: this.#nowAt(sent), detail: true });
    this.#fullUntil = 0;
    if (!r.allowed && r.retryAfterMs > 0 && this.#refunds === refunds) this.#refused = { r, sent, until: sent + r.retryAfterMs };
    return r;
  }

  /** Gives the unused permits back now; resolves to how many the server took back. */
  async close() {
    return this.#refund(this.#drop());
  }

  #start(t, r, n) {
    this.#reply = r;
    this.#taken = t;
    this.#left = n;
    this.#end = t + this.durationMs;
    this.#refundAt = r.now + this.durationMs;
    this.#timer = setTimeout(() => this.#refund(this.#drop()).catch(() => {}), this.durationMs);
    this.#timer.unref();
  }

  /** Ends the current lease: its unused permits and their score, if any. */
  #drop() {
    const unused = this.#left > 0 ? { n: this.#left, at: this.#refundAt } : null;
    this.#left = 0;
    this.#end = 0;
    clearTimeout(this.#timer);
    this.#timer = null;
    return unused;
  }

  // Redis away: the permits stay logged until their window passes (capacity held back, never
  // admitted twice).
  // The lease object's own refund forgets its refusals, when it starts and when it ends.
  async #refund(unused) {
    if (unused === null) return 0;
    this.#forget();
    try {
      return await this.sw.refund(this.key, unused.n, { at: unused.at });
    } finally {
      this.#forget();
    }
  }

  #forget() {
    this.#refunds++;
    this.#refused = null;
    this.#fullUntil = 0;
  }

  /** The lease's reply as of now: its held permits count as free, its waits run down. */
  #fromMemory(t) {
    const r = this.#reply;
    const left = this.#left;
    const elapsed = Math.floor(t - this.#taken);
    const state = (count, remaining, retry, reset) => {
      const free = remaining + left;
      return [count - left, free, free >= 1 ? 0 : Math.max(0, retry - elapsed), Math.max(0, reset - elapsed)];
    };
    const [count, remaining, retryAfterMs, resetAfterMs] = state(r.count, r.remaining, r.retryAfterMs, r.resetAfterMs);
    const states = r.states.map((s) => {
      const [c, rem, retry, reset] = state(s.count, s.remaining, s.retryAfterMs, s.resetAfterMs);
      return { count: c, remaining: rem, retryAfterMs: retry, resetAfterMs: reset };
    });
    return { ...r, allowed: true, count, remaining, retryAfterMs, resetAfterMs, states, now: r.now + elapsed };
  }
}

/** A remembered refusal `sinceMs` after its call: its waits run down. */
function runDown(r, sinceMs) {
  const elapsed = Math.floor(sinceMs);
  const less = (ms) => Math.max(0, ms - elapsed);
  const states = r.states?.map((s) => ({ ...s, retryAfterMs: less(s.retryAfterMs), resetAfterMs: less(s.resetAfterMs) }));
  return { ...r, retryAfterMs: less(r.retryAfterMs), resetAfterMs: less(r.resetAfterMs), states, now: r.now === undefined ? undefined : r.now + elapsed };
}

// The rate-limit headers of a result, byte for byte as services/gateway sends them (IETF
// httpapi RateLimit draft syntax).

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

module.exports = {
  SlidingWindow, Lease, Slot, Reservation, SlidingWindowError, UnavailableError, SCRIPT, CROCKFORD, canonicalIp, toArgs, toKeyArgs, toResult,
  headers, policyHeader, rateLimitHeader, retryAfterHeader, secondsUp,
};
