'use strict';
// The helper on both paths: a server with the module, and one without it (the Lua script).

const { test, before, after, describe } = require('node:test');
const assert = require('node:assert/strict');
const { SlidingWindow, CROCKFORD, canonicalIp } = require('..');
const { pathServer, newKey } = require('./server');

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

test('canonicalIp: an IPv4 client has one address, mapped or not, in any spelling', () => {
  const cases = {
    '10.1.2.3': '10.1.2.3',
    '::ffff:127.0.0.1': '127.0.0.1',
    '::FFFF:10.1.2.3': '10.1.2.3',
    '::ffff:7f00:1': '127.0.0.1',
    '0:0:0:0:0:ffff:7f00:1': '127.0.0.1',
    '0000:0000:0000:0000:0000:FFFF:7F00:0001': '127.0.0.1',
    '2001:DB8:0:0:0:0:0:1': '2001:db8::1',
    '2001:db8::ffff:1.2.3.4': '2001:db8::ffff:102:304',
    '::1': '::1',
    'fe80::1%eth0': 'fe80::1%eth0',
    x: 'x',
    '': '',
  };
  for (const [given, want] of Object.entries(cases)) assert.equal(canonicalIp(given), want, given);
  assert.equal(canonicalIp(undefined), undefined);
});

for (const path of ['module', 'lua']) {
  describe(`${path} path`, () => {
    let server, c, sw, key;
    before(async () => ({ server, c } = await pathServer(path)));
    after(() => server.close());
    const fresh = () => {
      key = newKey();
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

    // Several keys (ALLOWALL, PEEKALL) and REFUND: the contract's "Several keys" and "Refunds".

    test('allowAll charges every key or none, and names the binding key and limit', async () => {
      fresh();
      const [tenant, alice, bob] = ['tenant', 'alice', 'bob'].map((k) => `${key}:${k}`);
      const perUser = [{ window: 1, max: 10 }, { window: 60, max: 2 }];
      for (let i = 0; i < 2; i++) assert.ok((await sw.allowAll([[alice, perUser], [tenant, [60, 3]]], { now: NOW + i })).allowed);
      assert.deepEqual(await sw.allowAll(new Map([[alice, perUser], [tenant, [60, 3]]]), { now: NOW + 2 }), {
        ...result(false, 2, 0, 59_998, 59_999, 1),
        bindingKey: alice,
        bindingLimit: { window: 60, max: 2 },
      });
      assert.deepEqual([await c.zcard(alice), await c.zcard(tenant)], [2, 2]);
      const bobs = [{ key: bob, limits: perUser }, { key: tenant, limits: { window: 60, max: 3 } }];
      assert.ok((await sw.allowAll(bobs, { now: NOW + 3 })).allowed);
      const r = await sw.allowAll(bobs, { now: NOW + 4 });
      assert.deepEqual([r.allowed, r.bindingKey, r.bindingLimit, r.limit, r.retryAfterMs], [false, tenant, { window: 60, max: 3 }, 2, 59_996]);
      assert.deepEqual([await c.zcard(bob), await c.zcard(tenant)], [1, 3]);
    });

    test('peekAll changes nothing and answers as allowAll', async () => {
      fresh();
      const keyed = [[`${key}:a`, [60, 3]], [`${key}:b`, [60, 5]]];
      await sw.allowAll(keyed, { now: NOW });
      const state = () => Promise.all(keyed.map(async ([k]) => [await c.dumpBuffer(k), await c.call('PEXPIRETIME', k)]));
      const before = await state();
      const peeked = await sw.peekAll(keyed, { cost: 2, now: NOW + 10 });
      assert.deepEqual(await state(), before);
      assert.deepEqual(peeked, { ...result(true, 3, 0, 60_000, 60_000, 0), bindingKey: `${key}:a`, bindingLimit: { window: 60, max: 3 } });
      assert.deepEqual(await sw.allowAll(keyed, { cost: 2, now: NOW + 10 }), peeked);
    });

    test('allowAll over one key answers as allow, with a sixth integer', async () => {
      fresh();
      for (let i = 0; i < 4; i++) {
        const want = await sw.call('peek', key, [1, 2, NOW + i * 300, 'LIMIT', 60, 3]);
        assert.deepEqual(await sw.callKeys('allowall', [1, key, NOW + i * 300, 'LIMIT', 1, 1, 2, 'LIMIT', 1, 60, 3]), want);
      }
      assert.deepEqual(await sw.callKeys('peekall', [1, key, NOW, 'LIMIT', 1, 60, 9]), [1, 3, 6, 0, 60_300, 0]);
    });

    test('allowAll errors are exact and change nothing', async () => {
      fresh();
      const [k1, k2] = [`${key}:1`, `${key}:2`];
      await c.zadd(k1, NOW - 100_000, 'm');
      const cases = [
        [['x', k1, 1, 'LIMIT', 1, 1, 1], 'ERR numkeys must be an integer between 1 and 16, followed by that many keys and now'],
        [[7, k1, k2, 'a', 'b', 'c', 'd'], 'ERR numkeys must be an integer between 1 and 16, followed by that many keys and now'],
        [[1, k1, 1, 'LIMIT', 1, 1], "ERR wrong number of arguments for 'slidingwindow.COMMAND' command"],
        [[2, k1, k1, 1, 'LIMIT', 1, 1, 1], 'ERR key 2 is key 1 again: the keys of one call must be distinct'],
        [[2, k1, k2, 1, 'LIMIT', 1, 1, 1], 'ERR key 2 has no LIMIT: every key needs at least one'],
        [[1, k1, 1, 'COST', 1, 'LIMIT', 1, 1], "ERR syntax error, option 'LIMIT' needs three values (keyno window max)"],
        [[2, k1, k2, 1, 'LIMIT', 3, 1, 1], 'ERR LIMIT keyno must be an integer between 1 and numkeys (2)'],
        [[1, k1, 1, 'LIMIT', 1, 0, 1], `ERR LIMIT ${WINDOW_ERR}`],
        [[1, k1, 1, ...Array(17).fill(['LIMIT', 1, 1, 1]).flat()], 'ERR syntax error, at most 16 limits on one key (key 1)'],
        [[1, k1, 1, 'LIMIT', 1, 10, 200_000, 'COST', 100_001], 'ERR cost 100001 would add more than 100000 members in one call'],
      ];
      const before = await c.dumpBuffer(k1);
      for (const [args, want] of cases) {
        for (const command of ['allowall', 'peekall']) {
          assert.equal(await errorOf(sw.callKeys(command, args)), want.replace('COMMAND', command), `${command} ${args}`);
        }
      }
      await c.set(k2, 'x');
      assert.match(await errorOf(sw.allowAll([[k1, [60, 9]], [k2, [60, 9]]], { now: NOW })), /^WRONGTYPE Operation against a key/);
      assert.deepEqual(await c.dumpBuffer(k1), before);
    });

    test('refund takes back the newest, at or before AT', async () => {
      fresh();
      for (let i = 0; i < 4; i++) await sw.allow(key, [60, 10], { now: NOW + i * 10 });
      const expiry = await c.call('PEXPIRETIME', key);
      assert.equal(await sw.refund(key), 1);
      assert.equal(await sw.refund(key, 1, { at: NOW + 15 }), 1);
      assert.deepEqual(await scores(c, key), [NOW, NOW + 20]);
      assert.equal(await sw.refund(key, 5, { at: NOW - 1 }), 0);
      assert.equal(await c.call('PEXPIRETIME', key), expiry);
      assert.equal(await sw.refund(key, 9, { at: '*' }), 2);
      assert.equal(await c.exists(key), 0);
      assert.equal(await sw.refund(key), 0);
      assert.equal(await errorOf(sw.call('refund', key, [0])), 'ERR n must be an integer between 1 and 9007199254740992');
      assert.equal(await errorOf(sw.call('refund', key, [1, 'AT', 'x'])), 'ERR AT must be an integer between 0 and 9007199254740992, or *');
      assert.equal(await errorOf(sw.call('refund', key, [1, 'at', 1, 'AT', 2])), "ERR syntax error, option 'AT' given twice");
      await c.set(key, 'x');
      assert.match(await errorOf(sw.refund(key)), /^WRONGTYPE Operation against a key/);
    });

    test('a refund after allowAll restores every key', async () => {
      fresh();
      const keyed = [[`${key}:user`, [[1, 10], [60, 100]]], [`${key}:tenant`, [60, 1000]]];
      await sw.allowAll(keyed, { now: NOW });
      const want = await sw.peekAll(keyed, { now: NOW + 1 });
      assert.ok((await sw.allowAll(keyed, { cost: 3, now: NOW + 1 })).allowed);
      for (const [k] of keyed) assert.equal(await sw.refund(k, 3, { at: NOW + 1 }), 3);
      assert.deepEqual(await sw.peekAll(keyed, { now: NOW + 1 }), want);
    });

    test('top lists the keys refused most (module only)', async () => {
      fresh();
      if (path === 'lua') {
        await assert.rejects(sw.top(), /needs the module/);
        return;
      }
      assert.equal(await c.call('SLIDINGWINDOW.TOPRESET'), 'OK');
      const other = `${key}:other`;
      for (const [k, refusals] of [[key, 3], [other, 1]]) {
        assert.ok((await sw.allow(k, [60, 1], { now: NOW })).allowed);
        for (let i = 0; i < refusals; i++) assert.equal((await sw.allow(k, [60, 1], { now: NOW })).allowed, false);
      }
      assert.deepEqual(await sw.top(), [{ key, refused: 3, error: 0 }, { key: other, refused: 1, error: 0 }]);
      assert.deepEqual(await sw.top(1), [{ key, refused: 3, error: 0 }]);
      await assert.rejects(sw.top(0), TypeError);
    });
  });
}

async function scores(c, key) {
  const pairs = await c.zrange(key, 0, -1, 'WITHSCORES');
  return pairs.filter((_, i) => i % 2 === 1).map(Number);
}
