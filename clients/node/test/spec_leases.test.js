'use strict';
// The shared lease spec (spec/leases.json, made from testkit's model of the helpers' lease
// policy): every scenario replayed on the module path with the lease object on a fake clock,
// each reply, each close's refund and the SLIDINGWINDOW commands every step sent (INFO
// commandstats), exactly. The lease's clock answers t0 + the step's `at`.

const { test, before, after, describe } = require('node:test');
const assert = require('node:assert/strict');
const fs = require('node:fs');
const path = require('node:path');
const { randomUUID } = require('node:crypto');
const { SlidingWindow } = require('..');
const { startServer } = require('./server');

const spec = JSON.parse(fs.readFileSync(path.join(__dirname, '..', '..', '..', 'spec', 'leases.json'), 'utf8'));

/** Integers as numbers, arrays as arrays (ioredis answers numbers already). */
const plain = (v) => (Array.isArray(v) ? v.map(plain) : Number(v));

/** The SLIDINGWINDOW.ALLOW, .PEEK and .REFUND commands the server has executed (a missing entry: 0). */
async function commands(c) {
  const stats = await c.info('commandstats');
  const calls = { allow: 0, peek: 0, refund: 0 };
  for (const [, name, n] of stats.matchAll(/^cmdstat_slidingwindow\.(allow|peek|refund):calls=(\d+)/gm)) calls[name] = Number(n);
  return calls;
}

const less = (after, before) => Object.fromEntries(Object.keys(after).map((k) => [k, after[k] - before[k]]));

/** A result as the spec writes it: [allowed, count, remaining, retry_after_ms, reset_after_ms]. */
const figures = (r) => [r.allowed ? 1 : 0, r.count, r.remaining, r.retryAfterMs, r.resetAfterMs];

describe('module path: the shared lease spec', () => {
  let server;
  let sw; // the lease's helper
  let other; // another client's, for the raw calls
  let c; // INFO commandstats
  before(async () => {
    server = await startServer({ withModule: true });
    sw = new SlidingWindow(server.client(), { use: 'module' });
    other = new SlidingWindow(server.client(), { use: 'module' });
    c = server.client();
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
            const [command, ...args] = step.argv.map((w) => w.replaceAll('{t}', tag));
            const name = command.toLowerCase();
            const sent = name === 'allowall' || name === 'peekall' ? other.callKeys(name, args) : other.call(name, args[0], args.slice(1));
            if (step.error !== undefined) {
              const err = await sent.then(() => null, (e) => e);
              assert.equal(err?.message, step.error, `${where}: ${step.argv.join(' ')}`);
            } else {
              assert.deepEqual(plain(await sent), step.reply, `${where}: ${step.argv.join(' ')}`);
            }
            continue;
          }
          const before = await commands(c);
          if (step.op === 'allow') {
            assert.deepEqual(figures(await lease.allow()), step.reply, `${where}: reply`);
          } else if (step.op === 'close') {
            assert.equal(await lease.close(), step.returned, `${where}: returned`);
          } else {
            assert.fail(`${where}: unknown op`);
          }
          assert.deepEqual(less(await commands(c), before), step.calls, `${where}: calls`);
        }
      } finally {
        await lease.close().catch(() => {});
      }
    });
  }
});
