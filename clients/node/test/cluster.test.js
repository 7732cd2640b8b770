'use strict';
// The helper over ioredis's Redis.Cluster and node-redis's createCluster, on both paths: three
// masters, keys with hash tags. Module
// commands go straight to the node of their key's slot (no MOVED redirect); ALLOWALL's keys must
// share a slot, and the server refuses keys that do not with CROSSSLOT.

const { test, before, after, describe } = require('node:test');
const assert = require('node:assert/strict');
const { SlidingWindow } = require('..');
const { CLIENT_PATHS, startCluster } = require('./server');

const NOW = 1_700_000_000_000;

/** MOVED replies each node has sent since its stats were reset. */
async function moved(cluster) {
  const counts = await Promise.all(cluster.direct.map((c) => c.info('errorstats')));
  return counts.map((text) => Number((/errorstat_MOVED:count=(\d+)/.exec(text) || [0, 0])[1]));
}

for (const [kind, path] of CLIENT_PATHS) {
  describe(`${kind}, ${path} path on a cluster`, () => {
    let cluster;
    let c; // the helper's
    let inspect; // an ioredis Cluster to read keys with
    before(async () => {
      cluster = await startCluster({ withModule: path === 'module' });
      c = await cluster.connect(kind);
      inspect = cluster.client();
    });
    after(() => cluster.close());

    test('single-key calls reach their slot directly', async () => {
      const sw = new SlidingWindow(c);
      assert.equal(await sw.usesModule(), path === 'module');
      await Promise.all(cluster.direct.map((d) => d.config('RESETSTAT')));
      // Tags spread over the three masters.
      const keys = Array.from({ length: 12 }, (_, i) => `rl:{user:${i}}`);
      for (const key of keys) {
        for (let i = 0; i < 3; i++) assert.ok((await sw.allow(key, [60, 2], { now: NOW + i })).allowed === i < 2);
        assert.equal(await sw.refund(key, 1, { at: NOW + 1 }), 1);
        assert.ok((await sw.peek(key, [60, 2], { now: NOW + 2 })).allowed);
      }
      assert.deepEqual(await moved(cluster), [0, 0, 0]);
      const held = await Promise.all(cluster.direct.map((d) => d.dbsize()));
      assert.ok(held.filter((n) => n > 0).length > 1, `keys on one node only: ${held}`);
    });

    test('allowAll over keys with one hash tag', async () => {
      const sw = new SlidingWindow(c);
      const keyed = [['{tenant7}:user:42', [[1, 10], [60, 2]]], ['{tenant7}', [60, 3]]];
      assert.ok((await sw.allowAll(keyed, { now: NOW })).allowed);
      assert.ok((await sw.allowAll(keyed, { now: NOW + 1 })).allowed);
      const r = await sw.allowAll(keyed, { now: NOW + 2 });
      assert.deepEqual([r.allowed, r.bindingKey, r.bindingLimit], [false, '{tenant7}:user:42', { window: 60, max: 2 }]);
      assert.equal(await sw.refund('{tenant7}', 1, { at: NOW + 1 }), 1);
      assert.equal((await sw.peekAll([['{tenant7}', [60, 3]]], { now: NOW + 2 })).remaining, 1);
    });

    test('allowAll over keys in different slots is refused with CROSSSLOT', async () => {
      const sw = new SlidingWindow(c);
      await assert.rejects(sw.allowAll([['{a}:user', [60, 3]], ['{b}', [60, 3]]], { now: NOW }), { message: /^CROSSSLOT/ });
      assert.equal(await inspect.exists('{a}:user'), 0);
    });

    test('top asks every master and adds up', async () => {
      const sw = new SlidingWindow(c);
      if (path === 'lua') {
        await assert.rejects(sw.top(), /needs the module/);
        return;
      }
      await Promise.all(cluster.direct.map((d) => d.call('SLIDINGWINDOW.TOPRESET')));
      const keys = Array.from({ length: 12 }, (_, i) => `top:{user:${i}}`);
      for (const [i, key] of keys.entries()) {
        assert.ok((await sw.allow(key, [60, 1], { now: NOW })).allowed);
        for (let j = 0; j <= i; j++) assert.equal((await sw.allow(key, [60, 1], { now: NOW })).allowed, false);
      }
      const perNode = await Promise.all(cluster.direct.map((d) => d.call('SLIDINGWINDOW.TOP')));
      assert.ok(perNode.filter((entries) => entries.length > 0).length > 1, 'keys on one master only');
      const want = keys.map((key, i) => ({ key, refused: i + 1, error: 0 })).reverse();
      assert.deepEqual(await sw.top(12), want);
    });
  });
}
