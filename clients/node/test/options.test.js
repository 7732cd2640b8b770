'use strict';
// LEASE, PRECISION, DETAIL and lateness through the helper, on both paths; the lease object; the HTTP headers.

const { test, before, after, describe } = require('node:test');
const assert = require('node:assert/strict');
const { SlidingWindow, headers, policyHeader, rateLimitHeader, retryAfterHeader, secondsUp } = require('..');
const { pathServer, newKey, busiest, calls } = require('./server');

const NOW = 1_700_000_000_000;
const state = (count, remaining, retryAfterMs, resetAfterMs) => ({ count, remaining, retryAfterMs, resetAfterMs });

async function serverMs(c) {
  const [secs, micros] = await c.time();
  return Number(secs) * 1000 + Math.floor(Number(micros) / 1000);
}

async function scores(c, key) {
  const pairs = await c.zrange(key, 0, -1, 'WITHSCORES');
  return pairs.filter((_, i) => i % 2 === 1).map(Number);
}

async function poll(condition, what, deadlineMs = 10_000) {
  const end = Date.now() + deadlineMs;
  while (!(await condition())) {
    if (Date.now() > end) throw new Error(`not reached in ${deadlineMs} ms: ${what}`);
    await new Promise((r) => setTimeout(r, 5));
  }
}

for (const path of ['module', 'lua']) {
  describe(`${path} path: LEASE, PRECISION, DETAIL, lateness, leases`, () => {
    let server, c, key;
    before(async () => ({ server, c } = await pathServer(path)));
    after(() => server.close());
    const fresh = () => {
      key = newKey();
      return new SlidingWindow(c);
    };

    test('DETAIL gives every limit and the now used', async () => {
      const sw = fresh();
      const limits = [[1, 10], [60, 100]];
      for (let i = 0; i < 9; i++) await sw.allow(key, limits, { now: NOW + i });
      assert.deepEqual(await sw.allow(key, limits, { now: NOW + 200, detail: true }), {
        allowed: true, count: 10, remaining: 0, retryAfterMs: 800, resetAfterMs: 1000, limit: 0,
        states: [state(10, 0, 800, 1000), state(10, 90, 0, 60_000)], now: NOW + 200,
      });
      const peeked = await sw.peek(key, limits, { now: NOW + 200, detail: true });
      assert.deepEqual([peeked.allowed, peeked.states], [false, [state(10, 0, 800, 1000), state(10, 90, 0, 60_000)]]);
      assert.equal('states' in (await sw.peek(key, limits, { now: NOW + 200 })), false);
      const t0 = await serverMs(c);
      const r = await sw.allow(`${key}:star`, [60, 5], { detail: true });
      const t1 = await serverMs(c);
      assert.ok(t0 <= r.now && r.now <= t1, `${r.now} not in [${t0}, ${t1}]`);
    });

    test('DETAIL over several keys', async () => {
      const sw = fresh();
      const keyed = [[`${key}:user`, [[1, 2], [60, 5]]], [`${key}:tenant`, [60, 3]]];
      await sw.allowAll(keyed, { now: NOW });
      const r = await sw.allowAll(keyed, { now: NOW + 10, detail: true });
      assert.deepEqual(r, {
        allowed: true, count: 2, remaining: 0, retryAfterMs: 990, resetAfterMs: 1000, limit: 0,
        states: [state(2, 0, 990, 1000), state(2, 3, 0, 60_000), state(2, 1, 0, 60_000)], now: NOW + 10,
        bindingKey: `${key}:user`, bindingLimit: { window: 1, max: 2 },
      });
      assert.deepEqual((await sw.peekAll(keyed, { now: NOW + 10, detail: true })).states, r.states);
    });

    test('LEASE logs an admitted call at its end', async () => {
      const sw = fresh();
      const t0 = await serverMs(c);
      assert.deepEqual(await sw.allow(key, [60, 10], { cost: 4, now: NOW, lease: 500 }),
        { allowed: true, count: 4, remaining: 6, retryAfterMs: 0, resetAfterMs: 60_500, limit: 0 });
      const t1 = await serverMs(c);
      assert.deepEqual(await scores(c, key), [NOW + 500, NOW + 500, NOW + 500, NOW + 500]);
      const at = await c.call('PEXPIRETIME', key);
      assert.ok(t0 + 60_500 <= at && at <= t1 + 60_500);
      assert.equal(await sw.refund(key, 4, { at: NOW + 500 }), 4);
      await assert.rejects(sw.call('allow', key, [60, 5, NOW, 'LEASE', 0]), /^ReplyError: ERR LEASE must be an integer between 1 and 9007199254740992 - now/);
    });

    const result = (allowed, count, remaining, retryAfterMs, resetAfterMs) => ({ allowed, count, remaining, retryAfterMs, resetAfterMs, limit: 0 });

    test('PRECISION logs an admitted call at now rounded up', async () => {
      const sw = fresh();
      const t = 1_700_000_000_000;
      // Decided at now, logged at now rounded up to the second: docs/commands.md's example.
      const t0 = await serverMs(c);
      assert.deepEqual(await sw.allow(key, [60, 3], { now: t + 250, precision: 1000 }), result(true, 1, 2, 0, 60_750));
      const t1 = await serverMs(c);
      // The TTL is the window plus t - now from the server's clock (the second call's is shorter).
      const at = await c.call('PEXPIRETIME', key);
      assert.ok(t0 + 60_750 <= at && at <= t1 + 60_750, `expires at ${at}`);
      assert.deepEqual(await sw.allow(key, [60, 3], { now: t + 700, precision: 1000 }), result(true, 2, 1, 0, 60_300));
      assert.deepEqual(await scores(c, key), [t + 1000, t + 1000]);
      assert.deepEqual(await sw.peek(key, [60, 3], { cost: 2, now: t + 60_999 }), result(false, 2, 1, 1, 1));
      assert.equal((await sw.peek(key, [60, 3], { cost: 2, now: t + 61_000 })).allowed, true);
      // With a lease, now + ms is rounded up; PEEK answers what ALLOW does; PRECISION 1 changes nothing.
      const opts = { now: t + 1001, lease: 500, precision: 1000 };
      assert.deepEqual(await sw.peek(key, [60, 9], opts), await sw.allow(key, [60, 9], opts));
      assert.deepEqual(await sw.allow(key, [60, 9], { now: t + 1002, precision: 1 }), result(true, 4, 5, 0, 60_998));
      assert.deepEqual(await scores(c, key), [t + 1000, t + 1000, t + 1002, t + 2000]);
      // A caller takes such a request back at the same arithmetic.
      assert.equal(await sw.refund(key, 1, { at: t + 1999 }), 1);
      assert.deepEqual(await scores(c, key), [t + 1000, t + 1000, t + 2000]);
      // Over several keys every key's members are rounded alike.
      const keyed = [[`${key}:a`, [60, 5]], [`${key}:b`, [[1, 2], [60, 5]]]];
      const r = await sw.allowAll(keyed, { cost: 2, now: t + 3001, precision: 250, detail: true });
      assert.deepEqual([r.allowed, r.resetAfterMs, r.now], [true, 1249, t + 3001]);
      assert.deepEqual(await scores(c, `${key}:a`), [t + 3250, t + 3250]);
      assert.deepEqual(await scores(c, `${key}:b`), [t + 3250, t + 3250]);
      const again = { cost: 2, now: t + 3002, precision: 250 };
      assert.deepEqual(await sw.peekAll(keyed, again), await sw.allowAll(keyed, again));
    });

    test('PRECISION errors', async () => {
      const sw = fresh();
      const keyed = [[key, [60, 5]]];
      const calls = [
        (p) => sw.allow(key, [60, 5], { now: NOW, precision: p }),
        (p) => sw.peek(key, [60, 5], { now: NOW, precision: p }),
        (p) => sw.allowAll(keyed, { now: NOW, precision: p }),
        (p) => sw.peekAll(keyed, { now: NOW, precision: p }),
      ];
      // Refused before anything is sent, as the module would refuse it.
      for (const bad of [0, -1, 2 ** 53 + 2, 1.5, '1000', true, NaN, Infinity]) {
        for (const call of calls) await assert.rejects(call(bad), { name: 'TypeError', message: /^precision must be an integer between 1 and 9007199254740992/ });
      }
      assert.equal((await sw.peek(key, [60, 5], { now: NOW, precision: 2 ** 53 })).allowed, true);
      // The rounded score past 2^53 is the server's error on both paths, and changes nothing.
      const text = /^ReplyError: ERR PRECISION must be an integer between 1 and 9007199254740992 \(now \+ LEASE rounded up to a multiple of PRECISION <= 2\^53\)$/;
      await assert.rejects(sw.allow(key, [60, 5], { now: 2 ** 53 - 1, precision: 1000 }), text);
      await assert.rejects(sw.peekAll(keyed, { now: 9007199254740000, lease: 1, precision: 1000 }), text);
      await assert.rejects(sw.call('allow', key, [60, 5, NOW, 'PRECISION', 0]), text);
      await assert.rejects(sw.call('peek', key, [60, 5, NOW, 'precision', 'x']), text);
      await assert.rejects(sw.call('allow', key, [60, 5, NOW, 'PRECISION', 10, 'precision', 10]), /option 'precision' given twice/);
      assert.equal(await c.exists(key), 0);
    });

    test('PRECISION 1000 keeps a busy key to a few distinct scores', async () => {
      // 20,000 requests over 20 s of the callers' clock, window 10 s: the key holds every request
      // of its window but at most (Wmax + p) / p + 2 distinct scores, all multiples of p.
      const sw = fresh();
      let most = 0;
      for (let i = 0; i < 20_000; i++) {
        assert.equal((await sw.allow(key, [10, 1_000_000], { now: NOW + i, precision: 1000 })).allowed, true);
        if (i % 1000 === 999) {
          const logged = await scores(c, key);
          const distinct = new Set(logged);
          assert.ok([...distinct].every((s) => s % 1000 === 0));
          assert.ok(distinct.size <= 10_000 / 1000 + 1 + 2, `${i}: ${[...distinct]}`);
          // Nothing over-trimmed: every request of the window (now - 10 s, now] is still there.
          assert.ok(logged.length >= Math.min(i + 1, 10_000));
          most = Math.max(most, distinct.size);
        }
      }
      assert.ok(most >= 10, `at most ${most} distinct scores`);
    });

    for (const lateness of [0, 5000]) {
      test(`lateness ${lateness}: members kept longer, replies unchanged`, async () => {
        if (path === 'module') await c.config('SET', 'slidingwindow.lateness', lateness);
        try {
          fresh();
          const lua = new SlidingWindow(c, { lateness, use: path === 'module' ? 'module' : 'lua' });
          await c.zadd(key, NOW - 63_000, 'old', NOW - 66_000, 'older');
          const t0 = await serverMs(c);
          assert.deepEqual(await lua.allow(key, [60, 5], { now: NOW }), { allowed: true, count: 1, remaining: 4, retryAfterMs: 0, resetAfterMs: 60_000, limit: 0 });
          const t1 = await serverMs(c);
          assert.deepEqual(await scores(c, key), lateness ? [NOW - 63_000, NOW] : [NOW]);
          const at = await c.call('PEXPIRETIME', key);
          assert.ok(t0 + 60_000 + lateness <= at && at <= t1 + 60_000 + lateness, `expires at ${at}`);
        } finally {
          if (path === 'module') await c.config('SET', 'slidingwindow.lateness', 0);
        }
      });
    }

    test('a lease hands out exactly max, the last permits from a smaller lease', async () => {
      const sw = fresh();
      const lease = sw.lease(key, [60, 10], { size: 4, durationMs: 60_000 });
      await c.config('RESETSTAT');
      const got = [];
      for (let i = 0; i < 13; i++) got.push(await lease.allow());
      assert.deepEqual(got.map((r) => r.allowed), [...Array(10).fill(true), false, false, false]);
      assert.equal(await c.zcard(key), 10);
      assert.deepEqual(got.slice(0, 4).map((r) => [r.count, r.remaining]), [[1, 9], [2, 8], [3, 7], [4, 6]]);
      // Two leases of 4, then one of the 2 left: all logged at their lease's end, a minute on.
      const ends = [got[0], got[4], got[8]].map((r) => r.now + 60_000);
      assert.deepEqual(await scores(c, key), [...Array(4).fill(ends[0]), ...Array(4).fill(ends[1]), ...Array(2).fill(ends[2])]);
      // The first refusal is a PEEK's, remembered: the next ones come from memory, their wait
      // running down.
      assert.ok(got[10].retryAfterMs >= got[12].retryAfterMs && got[12].retryAfterMs > 0 && got[12].remaining === 0);
      assert.ok(got.every((r) => r.states.length === 1));
      assert.deepEqual(await calls(c), path === 'module' ? { allow: 4, peek: 1 } : { script: 5 });
      assert.equal(await lease.close(), 0);
    });

    test('a lease gives back what it did not hand out, on close and at its end', async () => {
      const sw = fresh();
      const lease = sw.lease(key, [[1, 100], [60, 1000]], { size: 10, durationMs: 60_000 });
      const first = await lease.allow();
      await Promise.all([lease.allow(), lease.allow()]);
      assert.equal(lease.permits, 7);
      assert.deepEqual(await scores(c, key), Array(10).fill(first.now + 60_000));
      assert.equal(await lease.close(), 7);
      assert.deepEqual(await scores(c, key), Array(3).fill(first.now + 60_000));
      const short = sw.lease(key, [60, 1000], { size: 10, durationMs: 50 });
      assert.ok((await short.allow()).allowed);
      await poll(async () => (await c.zcard(key)) === 4, 'the unused permits refunded at the end of the lease');
      assert.equal(short.permits, 0);
    });

    test('a lease remembers a refusal until its wait', async () => {
      const sw = fresh();
      // A lease of 5 can never fit a max of 3: an error, not a fallback.
      assert.throws(() => sw.lease(key, [[60, 5], [60, 3]], { size: 5, durationMs: 1000 }), /smallest max, 3/);
      assert.ok((await sw.allow(key, [1, 10], { cost: 8 })).allowed);
      const lease = sw.lease(key, [1, 10], { size: 5, durationMs: 60_000 });
      await c.config('RESETSTAT');
      // The lease of 5 is refused, one of the 2 left is taken; a PEEK then finds none left.
      const got = [];
      for (let i = 0; i < 3; i++) got.push(await lease.allow());
      assert.deepEqual(got.map((r) => r.allowed), [true, true, false]);
      // Until its wait has passed, every request is refused from memory.
      for (let i = 0; i < 50; i++) {
        const r = await lease.allow();
        assert.ok(!r.allowed && r.retryAfterMs > 0 && r.retryAfterMs <= got[2].retryAfterMs && r.remaining === 0);
      }
      assert.deepEqual(await calls(c), path === 'module' ? { allow: 2, peek: 1 } : { script: 3 });
      // After the wait (the 8 exact permits leave a second after they were logged), leases again.
      await poll(async () => (await lease.allow()).allowed, 'a lease once the wait has passed', 5000);
      assert.ok(lease.permits >= 1);
      await lease.close();
    });

    test('a lease forgets what it knew on its own refund', async () => {
      const sw = fresh();
      assert.ok((await sw.allow(key, [60, 10], { cost: 5 })).allowed);
      const lease = sw.lease(key, [60, 10], { size: 5, durationMs: 200 });
      await c.config('RESETSTAT');
      // A lease of the 5 left: no whole lease fits after it for a minute.
      assert.ok((await lease.allow()).allowed);
      await poll(async () => (await c.zcard(key)) === 6, 'the 4 unused refunded at the end of the lease');
      // That refund made room: the next request leases at once (5 refused, then the 4 left),
      // without a PEEK first.
      assert.ok((await lease.allow()).allowed && lease.permits === 3);
      assert.deepEqual(await calls(c), path === 'module' ? { allow: 3, refund: 1 } : { script: 4 });
      await lease.close();
    });

    test('a lease on its own clock: its calls pass the clock in whole ms, its end reads it', async () => {
      const sw = fresh();
      let at = 0.7; // ms after NOW; the calls pass whole ms
      const lease = sw.lease(key, [60, 10], { size: 4, durationMs: 60_000, clock: () => NOW + at });
      await c.config('RESETSTAT');
      const first = await lease.allow();
      assert.deepEqual([first.allowed, first.count, first.remaining, first.resetAfterMs, first.now], [true, 1, 9, 120_000, NOW]);
      assert.deepEqual(await scores(c, key), Array(4).fill(NOW + 60_000));
      // From memory, the waits run down and now moves on by the clock, not by the time elapsed.
      at = 59_999.9;
      assert.equal(lease.permits, 3);
      const later = await lease.allow();
      assert.deepEqual([later.count, later.resetAfterMs, later.now], [2, 60_001, NOW + 59_999]);
      // The lease ends at now + durationMs by the clock (and before its now, a clock set back).
      at = -1;
      assert.equal(lease.permits, 0);
      at = 60_000;
      assert.equal(lease.permits, 0);
      const next = await lease.allow();
      // (The 2 handed out, logged at the first lease's end, are still in the window.)
      assert.deepEqual([next.allowed, next.count, next.now], [true, 3, NOW + 60_000]);
      // The 2 unused permits went back before the new lease was taken, logged at its end.
      assert.deepEqual(await scores(c, key), [...Array(2).fill(NOW + 60_000), ...Array(4).fill(NOW + 120_000)]);
      assert.deepEqual(await calls(c), path === 'module' ? { allow: 2, refund: 1 } : { script: 3 });
      assert.equal(await lease.close(), 3);
    });

    test('a lease clock must be a function', async () => {
      const sw = fresh();
      for (const clock of [NOW, 'now', {}]) {
        assert.throws(() => sw.lease(key, [60, 10], { size: 1, durationMs: 1000, clock }), /^TypeError: clock must be a function/);
      }
      // No clock (undefined or null): the server's.
      const lease = sw.lease(key, [60, 10], { size: 1, durationMs: 1000, clock: null });
      const t0 = await serverMs(c);
      const r = await lease.allow();
      assert.ok(t0 <= r.now && r.now <= (await serverMs(c)));
      // A clock that answers no time: the request fails, Redis is not asked.
      const broken = sw.lease(`${key}:broken`, [60, 10], { size: 1, durationMs: 1000, clock: () => NaN });
      await assert.rejects(broken.allow(), /^TypeError: clock must answer Unix ms/);
      assert.equal(await c.exists(`${key}:broken`), 0);
    });

    test('500 concurrent callers share a lease and never exceed the limit', async () => {
      const sw = fresh();
      const lease = sw.lease(key, [1, 50], { size: 10, durationMs: 100 });
      const served = [];
      const stop = performance.now() + 2000;
      await Promise.all(Array.from({ length: 500 }, async () => {
        while (performance.now() < stop) {
          // The time the lease says it handed the permit out at (the server's clock): the time
          // this callback runs can lag the handout by the event loop's turns.
          const r = await lease.allow();
          if (r.allowed) served.push(r.now);
          await new Promise((r) => setImmediate(r));
        }
      }));
      await lease.close();
      served.sort((a, b) => a - b);
      assert.ok(busiest(served, 1000) <= 50, `served ${busiest(served, 1000)} in one second`);
      assert.ok(busiest(await scores(c, key), 1000) <= 50);
      assert.ok(served.length >= 50);
    });
  });
}

// What spec/headers.json (test/headers.test.js) cannot say: default names, rounding near 2**53,
// a result let through unchecked, the forms of keyed limits.
test('headers: the gateway\'s, byte for byte', () => {
  const limits = [{ window: 1, max: 10 }, { window: 60, max: 100 }];
  assert.equal(policyHeader([[1, 10], [60, 100]]), '"l0";q=10;w=1,"l1";q=100;w=60');
  const refused = { allowed: false, count: 100, remaining: 0, retryAfterMs: 1001, resetAfterMs: 59_000, limit: 1 };
  assert.equal(rateLimitHeader(refused), '"l1";r=0;t=59');
  assert.equal(retryAfterHeader(refused), '2');
  assert.equal(retryAfterHeader({ ...refused, retryAfterMs: -1 }), null);
  for (const [ms, s] of [[-1, 0], [0, 0], [1, 1], [999, 1], [1000, 1], [1001, 2], [60_000, 60], [9007199254740992, 9007199254741]]) {
    assert.equal(secondsUp(ms), s, String(ms));
  }
  assert.deepEqual(headers({ ...refused, allowed: true, error: new Error('down') }, limits), {});
  const keyed = [['rl:{acme}:u', [[1, 10]]], ['rl:{acme}', [60, 1000]]];
  assert.equal(policyHeader(keyed, ['user-1s', 'tenant-1m']), '"user-1s";q=10;w=1,"tenant-1m";q=1000;w=60');
  assert.equal(policyHeader(new Map(keyed)), '"l0";q=10;w=1,"l1";q=1000;w=60');
});
