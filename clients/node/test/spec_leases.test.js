'use strict';
// The shared lease spec (spec/leases.json, made from testkit's model of the helpers' lease
// policy): every scenario replayed on both paths and both clients (ioredis, node-redis) with the
// lease object on a fake clock, each reply, each close's refund and the commands every step sent
// (INFO commandstats) exactly: on the module path ALLOW, PEEK and REFUND each, on the script path
// their sum (the script's runs). The lease's clock answers t0 + the step's `at`.

const { test, before, after, describe } = require('node:test');
const assert = require('node:assert/strict');
const fs = require('node:fs');
const path = require('node:path');
const { randomUUID } = require('node:crypto');
const { SlidingWindow, SCRIPT } = require('..');
const { CLIENT_PATHS, startServer, calls } = require('./server');

const spec = JSON.parse(fs.readFileSync(path.join(__dirname, '..', '..', '..', 'spec', 'leases.json'), 'utf8'));

/** Integers as numbers, arrays as arrays (both clients answer numbers already). */
const plain = (v) => (Array.isArray(v) ? v.map(plain) : Number(v));

const COUNTED = ['allow', 'peek', 'refund'];

/** The counted commands run between two readings of `calls`: each on the module path, their sum as `script` on the script's. */
const less = (after, before, which) => (which === 'module'
  ? Object.fromEntries(COUNTED.map((k) => [k, (after[k] ?? 0) - (before[k] ?? 0)]))
  : { script: (after.script ?? 0) - (before.script ?? 0) });

/** A step's counted commands as `less` reports them on `which`. */
const want = (counted, which) => (which === 'module' ? counted : { script: COUNTED.reduce((n, k) => n + counted[k], 0) });

/** A result as the spec writes it: [allowed, count, remaining, retry_after_ms, reset_after_ms]. */
const figures = (r) => [r.allowed ? 1 : 0, r.count, r.remaining, r.retryAfterMs, r.resetAfterMs];

for (const [kind, which] of CLIENT_PATHS) {
  describe(`${kind}, ${which} path: the shared lease spec`, () => {
    let server;
    let sw; // the lease's helper
    let other; // another client's, for the raw calls
    let c; // INFO commandstats
    before(async () => {
      server = await startServer({ withModule: which === 'module' });
      sw = new SlidingWindow(await server.connect(kind), { use: which });
      other = new SlidingWindow(await server.connect(kind), { use: which });
      c = server.client();
      // Loaded before the first step, whose EVALSHA would otherwise count an EVAL too.
      if (which === 'lua') await c.call('SCRIPT', 'LOAD', SCRIPT);
    });
    after(() => server.close());

    test('spec/leases.json has scenarios, valid and invalid', () => {
      assert.ok(Number.isSafeInteger(spec.t0));
      assert.ok(spec.scenarios.some((s) => s.invalid) && spec.scenarios.some((s) => !s.invalid));
    });

    for (const [i, s] of spec.scenarios.entries()) {
      test(s.name, async () => {
        const tag = `{${randomUUID()}-${i}}`;
        const key = s.key.replaceAll('{t}', tag);
        let at = 0;
        const opts = { size: s.size, durationMs: s.duration_ms, clock: () => spec.t0 + at };
        if (s.invalid) {
          assert.throws(() => sw.lease(key, s.limits, opts), TypeError);
          assert.deepEqual(s.steps, []);
          return;
        }
        const lease = sw.lease(key, s.limits, opts);
        try {
          for (const [j, step] of s.steps.entries()) {
            at = step.at;
            const where = `step ${j} (${step.op} at ${step.at})`;
            if (step.op === 'call') {
              const [command, target, ...args] = step.argv.map((w) => w.replaceAll('{t}', tag));
              assert.deepEqual(plain(await other.call(command.toLowerCase(), target, args)), step.reply, `${where}: ${step.argv.join(' ')}`);
              continue;
            }
            const before = await calls(c);
            if (step.op === 'allow') {
              assert.deepEqual(figures(await lease.allow()), step.reply, `${where}: reply`);
            } else if (step.op === 'close') {
              assert.equal(await lease.close(), step.returned, `${where}: returned`);
            } else {
              assert.fail(`${where}: unknown op`);
            }
            assert.deepEqual(less(await calls(c), before, which), want(step.calls, which), `${where}: calls`);
          }
        } finally {
          await lease.close().catch(() => {});
        }
      });
    }
  });
}
