'use strict';
// Concurrent callers on one key (docs/clients.md, "Which time to pass"), through each client
// (ioredis, node-redis): 500 promises at 10 per
// second, every window of the scores logged holds at most 10 and the busiest exactly 10: with the
// server's clock ('*'), and with the callers' own clock when the server's lateness covers how far
// one caller's now may be behind another's. Then a lease object under overload: its refusals
// remembered, one Redis call for many requests, no window above the limit.

const { test, before, after, describe } = require('node:test');
const assert = require('node:assert/strict');
const { SlidingWindow } = require('..');
const { CLIENT_PATHS, startServer, newKey, busiest } = require('./server');

const CALLERS = 500;
const RUN_MS = 2000;
const LATENESS = 5000;

for (const [kind, path] of CLIENT_PATHS) {
  describe(`${kind}, ${path} path: ${CALLERS} concurrent callers`, () => {
    let server;
    before(async () => {
      server = await startServer({ withModule: path === 'module' });
    });
    after(() => server.close());

    for (const clock of ['server', 'caller']) {
      test(`${clock} clock: every window holds at most 10, the busiest 10`, async () => {
        const c = server.client();
        const lateness = clock === 'caller' ? LATENESS : 0;
        if (path === 'module') await c.config('SET', 'slidingwindow.lateness', lateness);
        const sw = new SlidingWindow(await server.connect(kind), { lateness });
        const key = newKey();
        // Every member the key ever held, by name (ULIDs never repeat), from ZRANGE WITHSCORES
        // snapshots taken while the traffic runs; complete when it holds as many as were admitted.
        const logged = new Map();
        const watcher = server.client();
        const snapshot = async () => {
          const pairs = await watcher.zrange(key, 0, -1, 'WITHSCORES');
          for (let i = 0; i < pairs.length; i += 2) logged.set(pairs[i], Number(pairs[i + 1]));
        };
        let running = true;
        const watching = (async () => {
          while (running) {
            await snapshot();
            await new Promise((r) => setTimeout(r, 50));
          }
        })();
        let admitted = 0;
        let calls = 0;
        let late = 0;
        const stop = performance.now() + RUN_MS;
        try {
          await Promise.all(Array.from({ length: CALLERS }, async () => {
            while (performance.now() < stop) {
              let now;
              if (clock === 'caller') {
                now = Date.now();
                // Stamped, then sent a little later: callers arrive out of order.
                await new Promise((r) => setTimeout(r, Math.random() * 20));
              }
              const r = await sw.allow(key, [1, 10], { now });
              if (now !== undefined) late = Math.max(late, Date.now() - now);
              calls++;
              if (r.allowed) admitted++;
            }
          }));
        } finally {
          running = false;
          await watching;
          if (path === 'module') await c.config('SET', 'slidingwindow.lateness', 0);
        }
        await snapshot();
        const scores = [...logged.values()].sort((a, b) => a - b);
        assert.equal(scores.length, admitted, 'the snapshots missed a logged request');
        // The premise: no call's now was further behind than the lateness covers.
        if (clock === 'caller') assert.ok(late < lateness, `a call arrived ${late} ms after its now`);
        assert.equal(busiest(scores, 1000), 10);
        assert.ok(admitted >= 10 * (RUN_MS / 1000) && calls > admitted);
      });
    }
  });
}

/**
 * Every member the key ever held, by name (ULIDs never repeat), from TIME + ZRANGE WITHSCORES
 * snapshots taken every 50 ms; a member gone while still inside its window (score > now - 1 s)
 * was refunded and no longer counts.
 */
function watch(client, key) {
  const logged = new Map();
  const snapshot = async () => {
    const [[, [secs, micros]], [, pairs]] = await client.multi().time().zrange(key, 0, -1, 'WITHSCORES').exec();
    const now = Number(secs) * 1000 + Math.floor(Number(micros) / 1000);
    const held = new Map();
    for (let i = 0; i < pairs.length; i += 2) held.set(pairs[i], Number(pairs[i + 1]));
    for (const [name, score] of logged) if (!held.has(name) && score > now - 1000) logged.delete(name);
    for (const [name, score] of held) logged.set(name, score);
  };
  let running = true;
  const watching = (async () => {
    while (running) {
      await snapshot();
      await new Promise((r) => setTimeout(r, 50));
    }
  })();
  return async () => {
    running = false;
    await watching;
    await snapshot();
    return [...logged.values()].sort((a, b) => a - b);
  };
}

/** The ALLOW, PEEK and REFUND calls the server ran (on the script path, the script's runs). */
async function slidingwindowCalls(c) {
  const stats = await c.info('commandstats');
  return [...stats.matchAll(/cmdstat_(?:slidingwindow\.(?:allow|peek|refund)|evalsha|eval):calls=(\d+)/g)].reduce((n, m) => n + Number(m[1]), 0);
}

const LIMIT = [1, 100];
const TASKS = 8;
const LEASE_RUN_MS = 5000;
// Each task's pause between requests: together about ten times what the limit admits.
const PAUSE_MS = (TASKS * 1000) / (10 * LIMIT[1]);

for (const [kind, path] of CLIENT_PATHS) {
  describe(`${kind}, ${path} path: a lease under overload`, () => {
    let server;
    before(async () => {
      server = await startServer({ withModule: path === 'module' });
    });
    after(() => server.close());

    test('8 tasks at 10x the limit: one call per 20 requests at most, no window above the limit', async () => {
      const c = server.client();
      const sw = new SlidingWindow(await server.connect(kind));
      const key = newKey();
      const lease = sw.lease(key, LIMIT, { size: 10, durationMs: 100 });
      const scoresOf = watch(server.client(), key);
      await c.config('RESETSTAT');
      const results = [];
      const stop = performance.now() + LEASE_RUN_MS;
      await Promise.all(Array.from({ length: TASKS }, async () => {
        while (performance.now() < stop) {
          results.push(await lease.allow());
          await new Promise((r) => setTimeout(r, PAUSE_MS));
        }
      }));
      await lease.close();
      const calls = await slidingwindowCalls(c);
      const scores = await scoresOf();
      const admitted = results.filter((r) => r.allowed).length;
      const refused = results.filter((r) => !r.allowed);
      assert.ok(results.length >= 5 * LIMIT[1] * (LEASE_RUN_MS / 1000), 'the tasks offered less than 5x the limit');
      assert.ok(calls * 20 <= results.length, `${calls} calls for ${results.length} requests`);
      assert.ok(busiest(scores, 1000) <= LIMIT[1], `${busiest(scores, 1000)} in one second`);
      assert.equal(scores.length, admitted);
      // A refusal answered from memory still tells how long to wait.
      assert.ok(refused.length > 0 && refused.every((r) => r.retryAfterMs > 0 && r.remaining === 0));
      const share = admitted / (LIMIT[1] * (LEASE_RUN_MS / 1000));
      console.log(`${kind}, ${path}: ${results.length} requests, ${calls} calls (${(calls / results.length).toFixed(4)} a request), ${admitted} admitted (${Math.round(share * 100)}% of what the limit allows)`);
    });
  });
}
