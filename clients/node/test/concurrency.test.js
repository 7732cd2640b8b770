'use strict';
// Concurrent callers on one key (docs/clients.md, "Which time to pass"): 500 promises at 10 per
// second, every window of the scores logged holds at most 10 and the busiest exactly 10: with the
// server's clock ('*'), and with the callers' own clock when the server's lateness covers how far
// one caller's now may be behind another's.

const { test, before, after, describe } = require('node:test');
const assert = require('node:assert/strict');
const { randomUUID } = require('node:crypto');
const { SlidingWindow } = require('..');
const { startServer } = require('./server');

const CALLERS = 500;
const RUN_MS = 2000;
const LATENESS = 5000;

/** The most times in any window (a, a + windowMs]. */
function busiest(times, windowMs) {
  let most = 0;
  let lo = 0;
  times.forEach((t, hi) => {
    while (times[lo] <= t - windowMs) lo++;
    most = Math.max(most, hi - lo + 1);
  });
  return most;
}

for (const path of ['module', 'lua']) {
  describe(`${path} path: ${CALLERS} concurrent callers`, () => {
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
        const sw = new SlidingWindow(c, { lateness });
        const key = `rl:{${randomUUID()}}`;
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
