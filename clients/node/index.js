'use strict';
// Sliding-window rate limits on Redis: SLIDINGWINDOW.ALLOW / PEEK where the module is loaded, the
// same contract in a Lua script (EVALSHA) where it is not, with identical replies and keys.

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

/** `window max now [COST n] [LIMIT window max]...`; limits are {window, max} or [window, max]. */
function toArgs(limits, cost = 1, now = undefined) {
  const one = !Array.isArray(limits) || (limits.length === 2 && !Array.isArray(limits[0]) && typeof limits[0] !== 'object');
  const list = (one ? [limits] : limits).map((l) => (Array.isArray(l) ? { window: l[0], max: l[1] } : l));
  if (list.length === 0) throw new TypeError('at least one limit is needed');
  const args = [list[0].window, list[0].max, now === undefined || now === null ? '*' : now];
  if (cost !== 1) args.push('COST', cost);
  for (const l of list.slice(1)) args.push('LIMIT', l.window, l.max);
  return args;
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
   */
  constructor(redis, { use = 'auto' } = {}) {
    if (!['auto', 'module', 'lua'].includes(use)) throw new TypeError("use must be 'auto', 'module' or 'lua'");
    this.redis = redis;
    this.module = use === 'auto' ? null : Promise.resolve(use === 'module');
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

  /** The raw reply of SLIDINGWINDOW.<command> key args..., on whichever path is in use. */
  async call(command, key, args) {
    if (await this.usesModule()) {
      try {
        return await this.redis.call(`SLIDINGWINDOW.${command.toUpperCase()}`, key, ...args);
      } catch (err) {
        // The module was unloaded (or a new server answers at the same address).
        if (!/^ERR unknown command/i.test(err.message)) throw err;
        this.module = Promise.resolve(false);
      }
    }
    const argv = [command.toLowerCase(), entropy(), ...args];
    try {
      return await this.redis.evalsha(SHA, 1, key, ...argv);
    } catch (err) {
      if (!/^NOSCRIPT/.test(err.message)) throw err;
      return this.redis.eval(SCRIPT, 1, key, ...argv);
    }
  }
}

module.exports = { SlidingWindow, SCRIPT, CROCKFORD, toArgs, toResult };
