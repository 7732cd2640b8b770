'use strict';
// The lease object: permits for one key handed out from memory.

const { SlidingWindowError } = require('./results');
const { given, toLimits } = require('./arguments');

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

module.exports = { Lease };
