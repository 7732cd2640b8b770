'use strict';
// In-flight limits and costs known after the response, over ALLOW and REFUND ... AT. A slot is an
// ALLOW on a window as long as the longest a request may hold it: its member leaves the window by
// itself when the hold passes (a holder that dies frees its slot then), and a release takes it
// back at once. A reservation is an ALLOW of the cost expected, settled when the real cost is
// known: the difference refunded at the reservation's score, or the excess charged by an ALLOW.

/** One request in flight (`sw.acquire`): `allowed` says whether it got a slot. */
class Slot {
  constructor(sw, key, result) {
    this.sw = sw;
    this.key = key;
    this.result = result;
    this.allowed = result.allowed;
    // A fail-open result (onError 'open') logged nothing: nothing to give back.
    this.held = result.allowed && result.now !== undefined;
  }

  /** Gives the slot back once (REFUND key 1 AT the acquire's now); resolves to whether a member was taken back. */
  async release() {
    if (!this.held) return false;
    this.held = false;
    return (await this.sw.refund(this.key, 1, { at: this.result.now })) === 1;
  }
}

/** `n` requests charged before the real cost is known (`sw.reserve`): `settle(used)` or `cancel()` closes it once. */
class Reservation {
  constructor(sw, key, limits, n, result) {
    this.sw = sw;
    this.key = key;
    this.limits = limits;
    this.n = n;
    this.result = result;
    this.allowed = result.allowed;
    this.open = result.allowed && result.now !== undefined;
  }

  /**
   * The real cost: `used < n` refunds `n - used` at the reservation's score; `used > n` charges
   * `used - n` with an ALLOW (COST used - n) on the same limits, an overrun when it does not fit.
   * Resolves to `{ refunded, charged, overrun }`.
   */
  async settle(used) {
    if (!Number.isSafeInteger(used) || used < 0) throw new TypeError('used must be an integer >= 0');
    this.#close();
    if (used < this.n) {
      return { refunded: await this.sw.refund(this.key, this.n - used, { at: this.result.now }), charged: 0, overrun: 0 };
    }
    if (used > this.n) {
      const extra = used - this.n;
      const { allowed } = await this.sw.allow(this.key, this.limits, { cost: extra });
      return { refunded: 0, charged: allowed ? extra : 0, overrun: allowed ? 0 : extra };
    }
    return { refunded: 0, charged: 0, overrun: 0 };
  }

  /** Refunds the whole reservation; resolves to the requests taken back. */
  async cancel() {
    this.#close();
    return this.sw.refund(this.key, this.n, { at: this.result.now });
  }

  #close() {
    if (!this.open) throw new Error('this reservation was refused, or is already settled or cancelled');
    this.open = false;
  }
}

module.exports = { Slot, Reservation };
