'use strict';
// Sliding-window rate limits on Redis: SLIDINGWINDOW.ALLOW / PEEK / ALLOWALL / PEEKALL / REFUND where
// the module is loaded, the same contract in a Lua script (EVALSHA) where it is not, with identical
// replies and keys.

const crypto = require('node:crypto');
const fs = require('node:fs');
const path = require('node:path');

const CROCKFORD = '0123456789ABCDEFGHJKMNPQRSTVWXYZ';
// clients/lua/slidingwindow.lua in the repository (this folder holds a link to it).
const SCRIPT = fs.readFileSync(path.join(__dirname, 'slidingwindow.lua'), 'utf8');
const SHA = crypto.createHash('sha1').update(SCRIPT).digest('hex');

/** Turns the reply's integers into the typed result; `limit` is the binding limit's index. */
function toResult(reply) {
  return {
    allowed: reply[0] === 1,
    count: reply[1],
    remaining: reply[2],
    retryAfterMs: reply[3],
    resetAfterMs: reply[4],
    limit: reply.length > 5 ? reply[5] : 0,
  };
}

/** One limit or a list of them, each {window, max} or [window, max], as a list of {window, max}. */
function toLimits(limits) {
  const one = !Array.isArray(limits) || (limits.length === 2 && !Array.isArray(limits[0]) && typeof limits[0] !== 'object');
  const list = (one ? [limits] : limits).map((l) => (Array.isArray(l) ? { window: l[0], max: l[1] } : { window: l.window, max: l.max }));
  if (list.length === 0) throw new TypeError('at least one limit is needed');
  return list;
}

const nowArg = (now) => (now === undefined || now === null ? '*' : now);

/** `window max now [COST n] [LIMIT window max]...`; limits are {window, max} or [window, max]. */
function toArgs(limits, cost = 1, now = undefined) {
  const list = toLimits(limits);
  const args = [list[0].window, list[0].max, nowArg(now)];
  if (cost !== 1) args.push('COST', cost);
  for (const l of list.slice(1)) args.push('LIMIT', l.window, l.max);
  return args;
}

/**
 * ALLOWALL's `numkeys key... now [COST n] LIMIT keyno window max...` for keys with their limits: a
 * Map, or a list of [key, limits] or {key, limits}, in order. `named[i]` is LIMIT option i's key and limit.
 */
function toKeyArgs(keyed, cost = 1, now = undefined) {
  const pairs = (keyed instanceof Map ? [...keyed] : keyed).map((p) => (Array.isArray(p) ? p : [p.key, p.limits]));
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
 * (Express's `req.ip`), and gets the quota of `a.b.c.d`. Anything else is returned as is.
 */
function canonicalIp(address) {
  const mapped = /^::ffff:(\d{1,3}(?:\.\d{1,3}){3})$/i.exec(address ?? '');
  return mapped ? mapped[1] : address;
}

function entropy() {
  const bytes = crypto.randomBytes(16);
  let out = '';
  for (const b of bytes) out += CROCKFORD[b & 31];
  return out;
}

class SlidingWindow {
  /**
   * @param redis an ioredis client (Redis or Cluster)
   * @param options.use 'auto' (ask the server once with COMMAND INFO, then cache), 'module' or 'lua'
   *   (a forced module path never falls back to the script)
   */
  constructor(redis, { use = 'auto' } = {}) {
    if (!['auto', 'module', 'lua'].includes(use)) throw new TypeError("use must be 'auto', 'module' or 'lua'");
    this.redis = redis;
    this.module = use === 'auto' ? null : Promise.resolve(use === 'module');
    this.auto = use === 'auto';
  }

  /** Whether calls go to the module (true) or the script (false). */
  usesModule() {
    if (this.module === null) {
      // Concurrent first calls share one question; a failed one is asked again next time.
      this.module = this.redis.call('COMMAND', 'INFO', 'slidingwindow.allow').then(
        (info) => Array.isArray(info) && info.some((entry) => entry),
        (err) => {
          this.module = null;
          throw err;
        },
      );
    }
    return this.module;
  }

  /** Admits the request if it fits every limit (and logs it); `now` in Unix ms, default the server clock. */
  async allow(key, limits, { cost = 1, now } = {}) {
    return toResult(await this.call('allow', key, toArgs(limits, cost, now)));
  }

  /** What `allow` would answer now, changing nothing. */
  async peek(key, limits, { cost = 1, now } = {}) {
    return toResult(await this.call('peek', key, toArgs(limits, cost, now)));
  }

  /**
   * Admits the request if it fits every limit of every key, and then logs it on every key (all or
   * nothing, one atomic call). `keyed`: a Map of key to limits, or a list of [key, limits] or
   * {key, limits}. The result names the binding limit: `bindingKey` and `bindingLimit`.
   */
  async allowAll(keyed, { cost = 1, now } = {}) {
    return this.#all('allowall', keyed, cost, now);
  }

  /** What `allowAll` would answer now, changing nothing. */
  async peekAll(keyed, { cost = 1, now } = {}) {
    return this.#all('peekall', keyed, cost, now);
  }

  /**
   * Takes back up to `n` logged requests: the newest scored at or before `at` (pass the `now` the
   * request was admitted with; '*' is the server's clock), or the newest whatever their score when
   * `at` is undefined. Resolves to how many were removed.
   */
  async refund(key, n = 1, { at } = {}) {
    return this.call('refund', key, at === undefined || at === null ? [n] : [n, 'AT', at]);
  }

  async #all(command, keyed, cost, now) {
    const { args, named } = toKeyArgs(keyed, cost, now);
    const result = toResult(await this.callKeys(command, args));
    const { key, limit } = named[result.limit];
    return { ...result, bindingKey: key, bindingLimit: limit };
  }

  /** The raw reply of SLIDINGWINDOW.<command> key args..., on whichever path is in use. */
  async call(command, key, args) {
    return this.#send(command, [key], [key, ...args], args);
  }

  /** The raw reply of SLIDINGWINDOW.ALLOWALL|PEEKALL numkeys key... rest..., on either path. */
  async callKeys(command, args) {
    // The script gets the keys as KEYS; a call without that many keys and a now gets none, and
    // the script answers the module's error.
    const numkeys = /^[0-9]{1,2}$/.test(String(args[0])) ? Number(args[0]) : 0;
    if (numkeys >= 1 && numkeys <= 16 && args.length >= numkeys + 2) {
      return this.#send(command, args.slice(1, numkeys + 1), args, [args[0], ...args.slice(numkeys + 1)]);
    }
    return this.#send(command, [], args, args);
  }

  async #send(command, keys, argv, rest) {
    if (await this.usesModule()) {
      try {
        // ioredis does not know a module command's keys: named here, so a Cluster sends the call
        // straight to the node of their slot (without them, to any node, and then follows MOVED).
        const name = `SLIDINGWINDOW.${command.toUpperCase()}`;
        if (this.Command === undefined) this.Command = commandClass(this.redis);
        if (this.Command === null) return await this.redis.call(name, ...argv);
        const sent = new this.Command(name, argv, { replyEncoding: 'utf8' });
        sent.keys = keys;
        return await this.redis.sendCommand(sent);
      } catch (err) {
        // The module was unloaded (or a new server answers at the same address).
        if (!this.auto || !/^ERR unknown command/i.test(err.message)) throw err;
        this.module = Promise.resolve(false);
      }
    }
    const script = [keys.length, ...keys, command.toLowerCase(), entropy(), ...rest];
    try {
      return await this.redis.evalsha(SHA, ...script);
    } catch (err) {
      if (!/^NOSCRIPT/.test(err.message)) throw err;
      return this.redis.eval(SCRIPT, ...script);
    }
  }
}

module.exports = { SlidingWindow, SCRIPT, CROCKFORD, canonicalIp, toArgs, toKeyArgs, toResult };
