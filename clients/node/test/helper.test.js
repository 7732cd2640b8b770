'use strict';
// The helper on both paths: a server with the module, and one without it (the Lua script).

const { test, before, after, describe } = require('node:test');
const assert = require('node:assert/strict');
const { randomUUID } = require('node:crypto');
const { SlidingWindow, CROCKFORD } = require('..');
const { startServer } = require('./server');

const NOW = 1_700_000_000_000;
const WINDOW_ERR = 'window must be an integer between 1 and 9007199254740 (window * 1000 <= 2^53)';
const MAX_ERR = 'max must be an integer between 1 and 9007199254740992';

const result = (allowed, count, remaining, retryAfterMs, resetAfterMs, limit) =>
  ({ allowed, count, remaining, retryAfterMs, resetAfterMs, limit });

async function serverMs(c) {
  const [secs, micros] = await c.time();
  return Number(secs) * 1000 + Math.floor(Number(micros) / 1000);
}

async function errorOf(promise) {
  await assert.rejects(promise);
  return promise.catch((e) => e.message);
}

function ulidMs(member) {
  assert.equal(member.length, 26, member);
  assert.ok([...member].every((ch) => CROCKFORD.includes(ch)) && member[0] <= '7', member);
  let ms = 0;
  for (const ch of member.slice(0, 10)) ms = ms * 32 + CROCKFORD.indexOf(ch);
  return ms;
}

for (const path of ['module', 'lua']) {
  describe(`${path} path`, () => {
    let server;
    let c;
    let sw;
    let key;
    before(async () => {
      server = await startServer({ withModule: path === 'module' });
      c = server.client();
    });
    after(() => server.close());
    const fresh = () => {
      key = `rl:{${randomUUID()}}`;
      sw = new SlidingWindow(c);
    };

    test('detects the path once', async () => {
      fresh();
      await c.config('RESETSTAT');
      await Promise.all([0, 1, 2].map((i) => sw.allow(key, { window: 60, max: 10 }, { now: NOW + i })));
      assert.equal(await sw.usesModule(), path === 'module');
      const stats = await c.info('commandstats');
      assert.match(stats, /cmdstat_command\|info:calls=1,/);
      if (path === 'module') assert.match(stats, /cmdstat_slidingwindow\.allow:calls=3,/);
      else assert.doesNotMatch(stats, /cmdstat_slidingwindow/);
    });

    test('a burst admits exactly max', async () => {
      fresh();
      const got = [];
      for (let i = 0; i < 6; i++) got.push(await sw.allow(key, [60, 5], { now: NOW + i }));
      assert.deepEqual(got.map((r) => r.allowed), [true, true, true, true, true, false]);
      assert.deepEqual(got[0], result(true, 1, 4, 0, 60_000, 0));
      assert.deepEqual(got[5], result(false, 5, 0, 59_995, 59_999, 0));
      assert.deepEqual(await sw.allow(key, [60, 5], { now: NOW + 60_000 }), result(true, 5, 0, 1, 60_000, 0));
      assert.equal(await c.zcard(key), 5);
    });

    test('peek changes nothing', async () => {
      fresh();
      await sw.allow(key, { window: 60, max: 3 }, { now: NOW });
      const state = async () => [await c.dumpBuffer(key), await c.call('PEXPIRETIME', key)];
      const before = await state();
      const peeked = await sw.peek(key, { window: 60, max: 3 }, { cost: 2, now: NOW + 10 });
      assert.deepEqual(await state(), before);
      assert.deepEqual(peeked, result(true, 3, 0, 60_000, 60_000, 0));
      assert.deepEqual(await sw.allow(key, { window: 60, max: 3 }, { cost: 2, now: NOW + 10 }), peeked);
    });

    test('cost, and a cost that never fits', async () => {
      fresh();
      assert.deepEqual(await sw.allow(key, [10, 5], { cost: 3, now: NOW }), result(true, 3, 2, 10_000, 10_000, 0));
      assert.deepEqual(await sw.allow(key, [10, 5], { cost: 3, now: NOW + 1 }), result(false, 3, 2, 9_999, 9_999, 0));
      assert.deepEqual(await sw.allow(key, [10, 5], { cost: 6, now: NOW + 1 }), result(false, 3, 2, -1, 9_999, 0));
    });

    test('members are ULIDs of now, TTL one window from the server clock', async () => {
      fresh();
      const t0 = await serverMs(c);
      await sw.allow(key, [60, 10], { cost: 4, now: NOW });
      const t1 = await serverMs(c);
      const pairs = await c.zrange(key, 0, -1, 'WITHSCORES');
      const members = pairs.filter((_, i) => i % 2 === 0);
      assert.equal(new Set(members).size, 4);
      for (const m of members) assert.equal(ulidMs(m), NOW);
      const at = await c.call('PEXPIRETIME', key);
      assert.ok(t0 + 60_000 <= at && at <= t1 + 60_000, `${at} not in [${t0 + 60_000}, ${t1 + 60_000}]`);
    });

    test('now defaults to the server clock', async () => {
      fresh();
      const t0 = await serverMs(c);
      assert.ok((await sw.allow(key, [60, 5])).allowed);
      const t1 = await serverMs(c);
      const score = Number((await c.zrange(key, 0, -1, 'WITHSCORES'))[1]);
      assert.ok(t0 <= score && score <= t1, `${score} not in [${t0}, ${t1}]`);
    });

    test('errors are exact and change nothing', async () => {
      fresh();
      await c.zadd(key, NOW, 'm');
      const cases = [
        [['x', 5, 1], `ERR ${WINDOW_ERR}`],
        [[10, 0, 1], `ERR ${MAX_ERR}`],
        [[10, 5, '-1'], 'ERR now must be an integer between 0 and 9007199254740992, or *'],
        [[10, 5, 1, 'COST', 0], 'ERR cost must be an integer between 1 and 9007199254740992'],
        [[10, 5, 1, 'cost', 1, 'CoSt', 2], "ERR syntax error, option 'CoSt' given twice"],
        [[10, 5, 1, 'COST'], "ERR syntax error, option 'COST' needs a value"],
        [[10, 5, 1, Buffer.from([13, 10, 0, 255])], "ERR syntax error, unknown option '\\x0d\\x0a\\x00\\xff'"],
        [[10, 200_000, 1, 'COST', 100_001], 'ERR cost 100001 would add more than 100000 members in one call'],
        [[10, 5], "ERR wrong number of arguments for 'slidingwindow.peek' command"],
      ];
      const before = await c.dumpBuffer(key);
      for (const [args, want] of cases) {
        assert.equal(await errorOf(sw.call('peek', key, args)), want.replace('.peek', '.peek'), JSON.stringify(args));
        assert.equal(await errorOf(sw.call('allow', key, args)), want.replace('.peek', '.allow'), JSON.stringify(args));
      }
      assert.deepEqual(await c.dumpBuffer(key), before);
      await c.set(key, 'x');
      assert.match(await errorOf(sw.call('allow', key, [10, 5, 1])), /^WRONGTYPE Operation against a key/);
    });

    // Several limits (LIMIT): the module gains them in its own change; these tests hold both paths to them.

    test('a second limit binds when the first has room', async () => {
      fresh();
      const limits = [{ window: 1, max: 3 }, { window: 60, max: 5 }];
      for (let i = 0; i < 3; i++) await sw.allow(key, limits, { now: NOW });
      assert.deepEqual(await sw.allow(key, limits, { now: NOW }), result(false, 3, 0, 1_000, 1_000, 0));
      assert.deepEqual(await sw.allow(key, limits, { now: NOW + 1_000 }), result(true, 4, 1, 0, 60_000, 1));
      assert.deepEqual(await sw.allow(key, limits, { now: NOW + 1_000 }), result(true, 5, 0, 59_000, 60_000, 1));
      assert.deepEqual(await sw.allow(key, limits, { now: NOW + 1_000 }), result(false, 5, 0, 59_000, 60_000, 1));
      const t0 = await serverMs(c);
      await sw.allow(key, [[1, 10], [3600, 100]], { now: NOW + 1_000 });
      const t1 = await serverMs(c);
      const at = await c.call('PEXPIRETIME', key);
      assert.ok(t0 + 3_600_000 <= at && at <= t1 + 3_600_000, `TTL of the longest window: ${at}`);
    });

    test('LIMIT errors are exact', async () => {
      fresh();
      const cases = [
        [[10, 5, 1, 'LIMIT'], "ERR syntax error, option 'LIMIT' needs two values"],
        [[10, 5, 1, 'limit', 5], "ERR syntax error, option 'limit' needs two values"],
        [[10, 5, 1, 'LIMIT', 0, 5], `ERR LIMIT ${WINDOW_ERR}`],
        [[10, 5, 1, 'LIMIT', 5, 0], `ERR LIMIT ${MAX_ERR}`],
        [[10, 5, 1, ...Array(16).fill(['LIMIT', 1, 1]).flat()], 'ERR syntax error, at most 16 limits in one call'],
      ];
      for (const [args, want] of cases) assert.equal(await errorOf(sw.call('allow', key, args)), want, JSON.stringify(args));
      assert.equal(await c.exists(key), 0);
    });
  });
}
