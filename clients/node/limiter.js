'use strict';
// The client: SLIDINGWINDOW.ALLOW / PEEK / ALLOWALL / PEEKALL / REFUND where the module is loaded,
// the same contract in a Lua script (EVALSHA) where it is not, with identical replies and keys; a
// call timeout, fail-open or -closed, WAIT after admissions.

const crypto = require('node:crypto');
const fs = require('node:fs');
const path = require('node:path');
const { Slot, Reservation } = require('./inflight');
const { Lease } = require('./lease');
const { SlidingWindowError, UnavailableError, toResult } = require('./results');
const { connect, isReply, isClosed, reason } = require('./connections');
const { toArgs, toKeyArgs, scoreOf } = require('./arguments');

const CROCKFORD = '0123456789ABCDEFGHJKMNPQRSTVWXYZ';
// clients/lua/slidingwindow.lua in the repository (this folder holds a link to it).
const SCRIPT = fs.readFileSync(path.join(__dirname, 'slidingwindow.lua'), 'utf8');
const SHA = crypto.createHash('sha1').update(SCRIPT).digest('hex');

const MAX_LATENESS = 86_400_000;

// Error replies about the server's state rather than the call: the on_error policy's, not the caller's.
const STATE_CODES = new Set(['READONLY', 'OOM', 'LOADING', 'MASTERDOWN', 'TRYAGAIN', 'CLUSTERDOWN', 'BUSY', 'MISCONF', 'NOREPLICAS']);

/** Whether a failure means Redis did not decide (rather than refusing the call's arguments). */
function unavailable(err) {
  if (err instanceof UnavailableError) return true;
  if (!isReply(err)) return true;
  return STATE_CODES.has(String(err.message).split(' ', 1)[0]);
}

function entropy() {
  const bytes = crypto.randomBytes(16);
  let out = '';
  for (const b of bytes) out += CROCKFORD[b & 31];
  return out;
}

class SlidingWindow {
  /**
   * @param redis an ioredis 5 client (Redis, one with Sentinel options, or Cluster) or a node-redis 5
   *   client (createClient or createCluster), connected
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
    }
    const connection = connect(redis);
    if (confirm !== undefined && connection.isCluster) throw new TypeError('confirm needs one master (Redis, Redis with Sentinel options, or createClient), not a cluster');
    this.redis = redis;
    this.connection = connection;
    this.module = use === 'auto' ? null : Promise.resolve(use === 'module');
    this.auto = use === 'auto';
    this.scriptWord = lateness === 0 ? '' : ` lateness ${lateness}`;
    this.timeout = timeout;
    this.onError = onError;
    this.confirm = confirm;
    this.onUnconfirmed = onUnconfirmed;
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
    const before = this.connection.connection();
    const acked = await this.#send(['WAIT', replicas, timeoutMs], [], this.timeout === 0 ? 0 : this.timeout + timeoutMs);
    if (acked >= replicas && this.connection.connection() === before) return { ...result, confirmed: true };
    if (this.onUnconfirmed === 'allow') return { ...result, confirmed: false };
    // Taken back exactly: this call's members, at the score they were logged with.
    for (const key of keys) await this.#command('refund', [key], [key, cost, 'AT', at], [cost, 'AT', at]);
    return { ...result, allowed: false, confirmed: false };
  }

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
    const replies = this.connection.isCluster
      ? await Promise.all((await this.#failures(() => this.connection.masters())).map((send) => this.#failures(() => send(ask, this.timeout))))
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

  /**
   * The raw reply of SLIDINGWINDOW.<command> key args..., on whichever path is in use. Rejects
   * with ReplyError for the call's own errors, UnavailableError when Redis does not decide.
   */
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

  /** One command with its keys named (a cluster sends it to the node of their slot) and the helper's timeout. */
  async #send(argv, keys, timeout = this.timeout) {
    return this.#failures(() => this.connection.send(argv, keys, timeout));
  }

  /**
   * What `call` resolves to; failures of Redis as UnavailableError, a node-redis client never
   * connected (or closed) as a SlidingWindowError.
   */
  async #failures(call) {
    try {
      return await call();
    } catch (err) {
      if (isClosed(err)) throw new SlidingWindowError('the node-redis client is closed: connect() it before calls', { cause: err });
      if (!unavailable(err)) throw err;
      // A timeout says little by itself: the connection's last error says why.
      const { lastError } = this.connection;
      const last = !isReply(err) && lastError !== null ? ` (the connection's last error: ${lastError.message})` : '';
      throw new UnavailableError(`Redis did not decide: ${reason(err)}${last}`, { cause: err });
    }
  }
}

module.exports = { SlidingWindow, SCRIPT, CROCKFORD };
