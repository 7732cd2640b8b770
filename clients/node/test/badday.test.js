'use strict';
// Redis down, slow, read-only or without replicas: the call timeout, onError and confirm; and no
// "Unhandled error event" from ioredis, no unhandled 'error' event from node-redis; each client.

const { test, describe } = require('node:test');
const assert = require('node:assert/strict');
const Redis = require('ioredis');
const { createClient, createCluster } = require('redis');
const { SlidingWindow, SlidingWindowError, UnavailableError, headers } = require('..');
const { CLIENT_PATHS, appClient, closeClient, startServer, newKey } = require('./server');

async function poll(condition, what, deadlineMs = 10_000) {
  const end = Date.now() + deadlineMs;
  while (!(await condition())) {
    if (Date.now() > end) throw new Error(`not reached in ${deadlineMs} ms: ${what}`);
    await new Promise((r) => setTimeout(r, 5));
  }
}

async function replicaOf(server, withModule) {
  const replica = await startServer({ withModule, extra: ['--replicaof', '127.0.0.1', String(server.port)] });
  const rc = replica.client();
  await poll(async () => /master_link_status:up/.test(await rc.info('replication')), "the replica's link");
  return { replica, rc };
}

for (const [kind, path] of CLIENT_PATHS) {
  describe(`${kind}, ${path} path on a bad day`, () => {
    const withModule = path === 'module';
    const key = newKey;

    test('Redis down: closed rejects with UnavailableError, open lets through, nothing unhandled', async () => {
      const server = await startServer({ withModule });
      // An app's own client with its library's defaults (retries, offline queue) and no error listener.
      const c = await appClient(kind, server.port);
      const printed = [];
      const print = console.error;
      console.error = (...args) => printed.push(args.join(' '));
      try {
        const closed = new SlidingWindow(c);
        const opened = new SlidingWindow(c, { onError: 'open', timeout: 300 });
        const k = key();
        assert.ok((await closed.allow(k, [60, 1])).allowed);
        await server.close();
        await assert.rejects(closed.allow(k, [60, 1]), (err) => err instanceof UnavailableError && err.cause instanceof Error);
        const r = await opened.allow(k, [60, 1]);
        assert.ok(r.allowed && r.error instanceof UnavailableError, JSON.stringify(r));
        assert.deepEqual(headers(r, [60, 1]), {});
        assert.ok((await opened.allowAll([[k, [60, 1]]])).error instanceof UnavailableError);
        await assert.rejects(opened.refund(k), UnavailableError);
      } finally {
        console.error = print;
        closeClient(c);
      }
      assert.deepEqual(printed.filter((line) => /Unhandled error event/.test(line)), []);
    });

    test('a paused server: the call fails at the timeout', async () => {
      const server = await startServer({ withModule });
      try {
        const sw = new SlidingWindow(await server.connect(kind), { timeout: 200 });
        const k = key();
        assert.ok((await sw.allow(k, [60, 5])).allowed);
        const admin = server.client();
        // WRITE: the pause holds ALLOW (and the script), not the CLIENT UNPAUSE below.
        await admin.call('CLIENT', 'PAUSE', 30_000, 'WRITE');
        try {
          await assert.rejects(sw.allow(k, [60, 5]), (err) => err instanceof UnavailableError && /timed out/.test(err.message));
        } finally {
          await admin.call('CLIENT', 'UNPAUSE');
        }
        // Both clients keep the timed-out command in their queue: its late reply is not the next call's.
        const r = await sw.allow(k, [60, 5], { detail: true });
        assert.equal(r.count, 3);
      } finally {
        await server.close();
      }
    });

    test('a replica answers READONLY: UnavailableError; PEEK runs there', async () => {
      const server = await startServer({ withModule });
      const { replica, rc } = await replicaOf(server, withModule);
      try {
        const replicaClient = await replica.connect(kind);
        const sw = new SlidingWindow(replicaClient);
        await assert.rejects(sw.allow(key(), [60, 5]), (err) => err instanceof UnavailableError && /READONLY/.test(err.message));
        assert.ok((await new SlidingWindow(replicaClient, { onError: 'open' }).allow(key(), [60, 5])).error);
        assert.deepEqual(await sw.peek(key(), [60, 5], { now: 1_700_000_000_000 }),
          { allowed: true, count: 1, remaining: 4, retryAfterMs: 0, resetAfterMs: 60_000, limit: 0 });
      } finally {
        await replica.close();
        await server.close();
      }
    });

    test('confirm: WAIT after each admission, deny takes the charge back', async () => {
      const server = await startServer({ withModule });
      try {
        const c = server.client(); // reads keys
        const own = await server.connect(kind); // the helper's
        const deny = new SlidingWindow(own, { confirm: { replicas: 1, timeoutMs: 20 } });
        const k = key();
        const r = await deny.allow(k, [60, 5], { detail: true });
        assert.deepEqual([r.allowed, r.confirmed, r.count], [false, false, 1]);
        assert.equal(await c.exists(k), 0);
        // Taken back at the score it was logged with: now + ms rounded up to the precision.
        const p = await deny.allow(k, [60, 5], { lease: 250, precision: 100_000 });
        assert.deepEqual([p.allowed, p.confirmed], [false, false]);
        assert.equal(await c.exists(k), 0);
        const allow = new SlidingWindow(own, { confirm: { replicas: 1, timeoutMs: 20 }, onUnconfirmed: 'allow' });
        const a = await allow.allow(k, [60, 5]);
        assert.deepEqual([a.allowed, a.confirmed, 'states' in a], [true, false, false]);
        const keyed = [[`${k}:a`, [60, 5]], [`${k}:b`, [60, 5]]];
        assert.equal((await deny.allowAll(keyed, { cost: 2 })).confirmed, false);
        assert.equal(await c.exists(`${k}:a`, `${k}:b`), 0);
        assert.equal((await deny.allow(k, [60, 1])).confirmed, undefined);
        const { replica, rc } = await replicaOf(server, withModule);
        try {
          const sure = new SlidingWindow(own, { confirm: { replicas: 1, timeoutMs: 5000 } });
          const got = [];
          for (let i = 0; i < 4; i++) got.push(await sure.allow(`${k}:r`, [60, 3]));
          assert.deepEqual(got.map((x) => [x.allowed, x.confirmed]), [[true, true], [true, true], [true, true], [false, undefined]]);
          assert.equal(await rc.zcard(`${k}:r`), 3);
        } finally {
          await replica.close();
        }
      } finally {
        await server.close();
      }
    });
  });
}

test('settings are checked', () => {
  const c = new Redis({ lazyConnect: true });
  for (const options of [{ onError: 'maybe' }, { onUnconfirmed: 'x' }, { timeout: -1 }, { lateness: -1 }, { lateness: 86_400_001 },
    { confirm: { replicas: 0, timeoutMs: 1 } }, { confirm: { replicas: 1, timeoutMs: -1 } }]) {
    assert.throws(() => new SlidingWindow(c, options), TypeError, JSON.stringify(options));
  }
  assert.throws(() => new SlidingWindow(c).lease('k', [1, 1], { size: 0, durationMs: 10 }), TypeError);
  assert.throws(() => new SlidingWindow(new Redis.Cluster([], { lazyConnect: true }), { confirm: { replicas: 1, timeoutMs: 1 } }), TypeError);
  c.disconnect();
  assert.throws(() => new SlidingWindow(createClient(), { onError: 'maybe' }), TypeError);
  assert.throws(() => new SlidingWindow(createCluster({ rootNodes: [{ socket: { port: 1 } }] }), { confirm: { replicas: 1, timeoutMs: 1 } }), TypeError);
  for (const other of [undefined, {}, { sendCommand() {} }]) assert.throws(() => new SlidingWindow(other), TypeError);
});

test('node-redis: a client never connected is a loud error, not Redis away', async () => {
  for (const onError of ['closed', 'open']) {
    const sw = new SlidingWindow(createClient({ socket: { host: '127.0.0.1', port: 1 } }), { onError });
    await assert.rejects(sw.allow(newKey(), [60, 1]), (err) => err instanceof SlidingWindowError && !(err instanceof UnavailableError) && /connect\(\)/.test(err.message));
  }
});
