'use strict';
// The shared header spec (spec/headers.json, made by testkit): every reply's headers, variant
// `gateway`, exactly; keyed limits (allowAll's) as a Map of key to limits.

const { test } = require('node:test');
const assert = require('node:assert/strict');
const fs = require('node:fs');
const path = require('node:path');
const { headers } = require('..');

const spec = JSON.parse(fs.readFileSync(path.join(__dirname, '..', '..', '..', 'spec', 'headers.json'), 'utf8'));

test('headers: every case of the shared header spec', () => {
  for (const c of spec.cases) {
    const limits = c.limits.map((l) => ({ window: l.window, max: l.max }));
    const keyed = new Map();
    c.limits.forEach((l, i) => keyed.set(`k${l.key}`, [...(keyed.get(`k${l.key}`) ?? []), limits[i]]));
    const r = c.reply;
    const result = {
      allowed: r.allowed, count: r.count, remaining: r.remaining, retryAfterMs: r.retry_after_ms, resetAfterMs: r.reset_after_ms, limit: r.limit,
    };
    const got = headers(result, keyed.size > 1 ? keyed : limits, c.limits.map((l) => l.name));
    assert.deepEqual(Object.entries(got), c.headers.gateway, c.name);
  }
  assert.ok(spec.cases.length > 30);
});
