'use strict';
// The Lua path against the module through this helper, on one server with the module loaded: the
// same seeded random call streams (COST, PEEK, LIMIT, time going back, whole windows passing) go to
// twin keys driven by the module and by the script, and to a third key driven by either at random.
// The script's own logic is held to a model of the contract in clients/python/tests.

const { test, before, after } = require('node:test');
const assert = require('node:assert/strict');
const { SlidingWindow } = require('..');
const { startServer } = require('./server');

const START = 1_700_000_000_000;

/** mulberry32: a seeded generator, so a failure reproduces. */
function rng(seed) {
  let a = seed >>> 0;
  const next = () => {
    a = (a + 0x6d2b79f5) >>> 0;
    let t = a;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
  const int = (lo, hi) => lo + Math.floor(next() * (hi - lo + 1));
  return { int, pick: (xs) => xs[int(0, xs.length - 1)] };
}

async function outcome(promise) {
  try {
    return await promise;
  } catch (e) {
    return `error: ${e.message}`;
  }
}

let server;
let c;
before(async () => {
  server = await startServer({ withModule: true });
  c = server.client();
});
after(() => server.close());

async function scores(key) {
  const pairs = await c.zrange(key, 0, -1, 'WITHSCORES');
  return pairs.filter((_, i) => i % 2 === 1);
}

async function run({ name, seed, steps, windows, maxes, most, back, jump, stride }) {
  const module = new SlidingWindow(c, { use: 'module' });
  const lua = new SlidingWindow(c, { use: 'lua' });
  const r = rng(seed);
  const keys = { module: `${name}:module:{${seed}}`, lua: `${name}:lua:{${seed}}`, mixed: `${name}:mixed:{${seed}}` };
  let now = START;
  let admitted = 0;
  for (let step = 0; step < steps; step++) {
    const limits = Array.from({ length: r.int(1, most) }, () => [r.pick(windows), r.pick(maxes)]);
    // A window of a minute or more keeps every key alive (by the server's clock) during the run.
    if (Math.max(...limits.map(([w]) => w)) < 60) limits[0] = [60, r.pick(maxes)];
    const wmax = Math.max(...limits.map(([w]) => w)) * 1000;
    const dice = r.int(0, 999);
    if (dice < back) now -= r.int(0, wmax);
    else if (dice < back + jump) now += r.int(1, 3) * wmax + r.int(-1, 1);
    else now += r.int(0, stride);
    const roll = r.int(0, 99);
    const cost = roll < 10 ? r.int(2, 4) : roll < 13 ? Math.min(...limits.map(([, m]) => m)) + 1 : 1;
    const command = r.int(0, 99) < 30 ? 'peek' : 'allow';
    const args = [limits[0][0], limits[0][1], now, ...(cost === 1 ? [] : ['COST', cost])];
    for (const [w, m] of limits.slice(1)) args.push('LIMIT', w, m);
    const mixed = r.pick([module, lua]);
    const what = `${name} step ${step}: ${command} ${args.join(' ')}`;

    const want = await outcome(module.call(command, keys.module, args));
    assert.deepEqual(await outcome(lua.call(command, keys.lua, args)), want, what);
    assert.deepEqual(await outcome(mixed.call(command, keys.mixed, args)), want, what);
    const expected = await scores(keys.module);
    assert.deepEqual(await scores(keys.lua), expected, what);
    assert.deepEqual(await scores(keys.mixed), expected, what);
    const ttls = await Promise.all(Object.values(keys).map((k) => c.pttl(k)));
    assert.deepEqual(ttls.map((t) => t > 0), ttls.map(() => ttls[0] > 0), `${what}: TTLs ${ttls}`);
    if (command === 'allow' && Array.isArray(want) && want[0] === 1) admitted++;
  }
  assert.ok(admitted > 0 && admitted < steps, `${name}: ${admitted} admitted`);
}

test('one limit: script and module agree', () =>
  run({ name: 'one', seed: 11, steps: 400, windows: [60, 120], maxes: [1, 3, 8], most: 1, back: 50, jump: 30, stride: 10_000 }));

test('several limits: script and module agree', () =>
  run({ name: 'several', seed: 12, steps: 400, windows: [1, 2, 10, 60], maxes: [1, 3, 7], most: 4, back: 50, jump: 30, stride: 600 }));

const TOKENS = ['', '0', '1', '01', '-1', '1.5', 'inf', '*', 'x', '9007199254740993', '9007199254740992',
  'COST', 'cost', 'FOO', Buffer.from([0, 255])];
const OPTIONS = [...TOKENS, 'LIMIT', 'limit', 'LEASE', 'lease', 'PRECISION', 'precision', '1000', 'DETAIL', 'detail', '9007199254740000'];

for (const [label, pool] of [['options', TOKENS], ['with LIMIT', [...TOKENS, 'LIMIT', 'limit']], ['with LEASE, PRECISION and DETAIL', OPTIONS]]) {
  test(`any arguments (${label}): the same reply or the same error text`, async () => {
    const module = new SlidingWindow(c, { use: 'module' });
    const lua = new SlidingWindow(c, { use: 'lua' });
    const r = rng(13);
    for (let i = 0; i < 2000; i++) {
      const args = Array.from({ length: r.int(0, 10) }, () => r.pick(pool));
      if (r.int(0, 2)) args.splice(0, 3, r.int(1, 100), r.int(1, 10), START + i);
      const command = r.pick(['allow', 'peek']);
      const key = `junk:${label}:${i}`;
      const want = await outcome(module.call(command, `${key}:m`, args));
      assert.deepEqual(await outcome(lua.call(command, `${key}:l`, args)), want, `${command} ${args.join(' ')}`);
      assert.deepEqual(await scores(`${key}:l`), await scores(`${key}:m`), `${command} ${args.join(' ')}`);
    }
  });
}

// ALLOWALL, PEEKALL and REFUND: twin sets of keys (one hash tag each, as a cluster needs), one
// driven by the module, one by the script, one by either at random; replies and every key's
// scores must agree. Time goes back, whole windows pass, and refunds come with AT and without.
async function runKeys({ name, seed, steps, pool, mostKeys, mostLimits, windows, maxes, refunds, peeks }) {
  const module = new SlidingWindow(c, { use: 'module' });
  const lua = new SlidingWindow(c, { use: 'lua' });
  const r = rng(seed);
  const sets = Object.fromEntries(['module', 'lua', 'mixed'].map((p) => [p, Array.from({ length: pool }, (_, k) => `${name}:${p}:${k}:{${seed}}`)]));
  let now = START;
  let admitted = 0;
  let refunded = 0;
  for (let step = 0; step < steps; step++) {
    const dice = r.int(0, 999);
    if (dice < 60) now -= r.int(0, 60_000);
    else if (dice < 80) now += r.int(60_000, 180_000) + r.int(-1, 1);
    else now += r.int(0, 2_000);
    const mixed = r.pick([module, lua]);
    const roll = r.int(0, 99);
    let want;
    let what;
    if (roll < refunds) {
      const k = r.int(0, pool - 1);
      const at = r.pick([undefined, now, now - r.int(0, 5_000), '*']);
      const args = [r.pick([1, 1, 2, 3, 10]), ...(at === undefined ? [] : ['AT', at])];
      what = `${name} step ${step}: refund key ${k} ${args.join(' ')}`;
      want = await outcome(module.call('refund', sets.module[k], args));
      assert.deepEqual(await outcome(lua.call('refund', sets.lua[k], args)), want, what);
      assert.deepEqual(await outcome(mixed.call('refund', sets.mixed[k], args)), want, what);
      refunded += typeof want === 'number' ? want : 0;
    } else {
      const command = roll < refunds + peeks ? 'peekall' : 'allowall';
      const chosen = [];
      while (chosen.length < r.int(1, mostKeys)) {
        const k = r.int(0, pool - 1);
        if (!chosen.includes(k)) chosen.push(k);
      }
      const limits = [];
      chosen.forEach((k, i) => {
        const mine = Array.from({ length: r.int(1, mostLimits) }, () => [r.pick(windows), r.pick(maxes)]);
        if (Math.max(...mine.map(([w]) => w)) < 60) mine[0][0] = 60;
        for (const [w, m] of mine) limits.push([i + 1, w, m]);
      });
      for (let i = limits.length - 1; i > 0; i--) {
        const j = r.int(0, i);
        [limits[i], limits[j]] = [limits[j], limits[i]];
      }
      const roll2 = r.int(0, 9);
      const cost = roll2 < 7 ? 1 : roll2 < 9 ? r.int(2, 3) : Math.min(...limits.map(([, , m]) => m)) + 1;
      const argsOf = (p) => [chosen.length, ...chosen.map((k) => sets[p][k]), now, ...(cost === 1 ? [] : ['COST', cost]),
        ...limits.flatMap(([keyno, w, m]) => ['LIMIT', keyno, w, m])];
      what = `${name} step ${step}: ${command} ${argsOf('lua').join(' ')}`;
      want = await outcome(module.callKeys(command, argsOf('module')));
      assert.deepEqual(await outcome(lua.callKeys(command, argsOf('lua'))), want, what);
      assert.deepEqual(await outcome(mixed.callKeys(command, argsOf('mixed'))), want, what);
      if (command === 'allowall' && Array.isArray(want) && want[0] === 1) admitted++;
    }
    for (let k = 0; k < pool; k++) {
      const expected = await scores(sets.module[k]);
      assert.deepEqual(await scores(sets.lua[k]), expected, `${what}: key ${k}`);
      assert.deepEqual(await scores(sets.mixed[k]), expected, `${what}: key ${k}`);
      const ttls = await Promise.all(['module', 'lua', 'mixed'].map((p) => c.pttl(sets[p][k])));
      assert.deepEqual(ttls.map((t) => t > 0), ttls.map(() => ttls[0] > 0), `${what}: key ${k} TTLs ${ttls}`);
    }
  }
  assert.ok(admitted > 0 && admitted < steps && refunded > 0, `${name}: ${admitted} admitted, ${refunded} refunded`);
}

test('several keys and refunds: script and module agree', () =>
  runKeys({ name: 'tenant', seed: 14, steps: 300, pool: 3, mostKeys: 2, mostLimits: 2, windows: [1, 60], maxes: [2, 3, 6], refunds: 25, peeks: 20 }));

test('many keys, many limits: script and module agree', () =>
  runKeys({ name: 'wide', seed: 15, steps: 200, pool: 6, mostKeys: 6, mostLimits: 4, windows: [1, 5, 60, 120], maxes: [1, 3, 8], refunds: 25, peeks: 20 }));

const KEY_TOKENS = ['', '0', '1', '2', '3', '17', '-1', '1.5', 'inf', '*', 'x', '9007199254740993', 'COST', 'cost',
  'LIMIT', 'limit', 'AT', 'at', 'FOO', Buffer.from([0, 255]), 'k1', 'k2', 'LEASE', 'lease', 'PRECISION', 'precision', '1000', 'DETAIL', 'detail'];

for (const command of ['allowall', 'peekall', 'refund']) {
  test(`any arguments (${command}): the same reply or the same error text`, async () => {
    const module = new SlidingWindow(c, { use: 'module' });
    const lua = new SlidingWindow(c, { use: 'lua' });
    const r = rng(command.length);
    for (let i = 0; i < 1500; i++) {
      const args = Array.from({ length: r.int(0, 12) }, () => r.pick(KEY_TOKENS));
      if (r.int(0, 2)) {
        if (command === 'refund') args.splice(0, 1, r.int(1, 3));
        else {
          const n = r.int(1, 3);
          const limits = r.int(0, 1) ? Array.from({ length: n }, (_, j) => ['LIMIT', j + 1, 60, 5]).flat() : [];
          args.unshift(n, ...Array.from({ length: n }, (_, j) => `k${j + 1}`), START + i, ...limits);
        }
      }
      const base = (p) => `junk:${command}:{${i}}:${p}`;
      const named = (p) => args.map((a) => (typeof a === 'string' && /^k[123]$/.test(a) ? `${base(p)}:${a}` : a));
      for (const p of ['m', 'l']) {
        for (const k of ['', ':k1', ':k2']) await c.zadd(`${base(p)}${k}`, START + i - 1, 'a', START + i - 2, 'b');
      }
      const send = (sw, p) => (command === 'refund' ? sw.call(command, base(p), args) : sw.callKeys(command, named(p)));
      const what = `${command} ${args.join(' ')}`;
      // Error texts may quote a key: each side's keys are named alike there.
      const plain = (got, p) => (typeof got === 'string' ? got.split(base(p)).join('KEY') : got);
      assert.deepEqual(plain(await outcome(send(lua, 'l')), 'l'), plain(await outcome(send(module, 'm')), 'm'), what);
      for (const k of ['', ':k1', ':k2', ':k3']) assert.deepEqual(await scores(`${base('l')}${k}`), await scores(`${base('m')}${k}`), what);
    }
  });
}

// LEASE, PRECISION, DETAIL and lateness: the module (with slidingwindow.lateness set) against the script (with
// the helper's lateness set alike), on twin keys of one hash tag: replies, error texts, scores and
// expiries must agree, over ALLOW, PEEK, ALLOWALL, PEEKALL and REFUND.
async function serverMs() {
  const [secs, micros] = await c.time();
  return Number(secs) * 1000 + Math.floor(Number(micros) / 1000);
}

async function runOptions(seed, lateness, steps) {
  await c.config('SET', 'slidingwindow.lateness', lateness);
  const module = new SlidingWindow(c, { use: 'module' });
  const lua = new SlidingWindow(c, { use: 'lua', lateness });
  const r = rng(seed);
  const keys = Object.fromEntries(['m', 'l'].map((p) => [p, [0, 1, 2].map((k) => `opt:${seed}:${p}:${k}:{${seed}}`)]));
  const slack = {};
  const seen = { lease: 0, precision: 0, detail: 0, admitted: 0 };
  let now = START;
  try {
    for (let step = 0; step < steps; step++) {
      const dice = r.int(0, 99);
      if (dice < 10) now -= r.int(0, lateness + 2000);
      else if (dice < 13) now += r.int(60_000, 200_000);
      else now += r.int(0, 700);
      const groups = [];
      if (r.int(0, 2) === 0) {
        groups.push([r.pick(['LEASE', 'lease']), r.pick([1, 250, 1000, 60_000])]);
        seen.lease++;
      }
      if (r.int(0, 2) === 0) {
        groups.push([r.pick(['PRECISION', 'precision']), r.pick([1, 7, 1000, 60_000])]);
        seen.precision++;
      }
      if (r.int(0, 1) === 0) {
        groups.push([r.pick(['DETAIL', 'detail'])]);
        seen.detail++;
      }
      for (let i = groups.length - 1; i > 0; i--) {
        const j = r.int(0, i);
        [groups[i], groups[j]] = [groups[j], groups[i]];
      }
      const extra = groups.flat();
      const roll = r.int(0, 99);
      let command;
      let touched;
      let send;
      if (roll < 15) {
        const k = r.int(0, 2);
        const args = [r.pick([1, 2, 5]), ...r.pick([[], ['AT', now], ['AT', now + 60_000], ['AT', '*']])];
        [command, touched] = ['refund', [k]];
        send = (sw, p) => sw.call('refund', keys[p][k], args);
      } else if (roll < 55) {
        const k = r.int(0, 2);
        const limits = Array.from({ length: r.int(1, 3) }, () => [r.pick([1, 2, 60]), r.pick([2, 4, 8])]);
        if (Math.max(...limits.map(([w]) => w)) < 60) limits[0][0] = 60;
        const args = [limits[0][0], limits[0][1], now, 'COST', r.pick([1, 1, 1, 2, 3]), ...limits.slice(1).flatMap(([w, m]) => ['LIMIT', w, m]), ...extra];
        [command, touched] = [r.pick(['allow', 'allow', 'peek']), [k]];
        send = (sw, p) => sw.call(command, keys[p][k], args);
      } else {
        const chosen = [];
        const n = r.int(1, 3);
        while (chosen.length < n) {
          const k = r.int(0, 2);
          if (!chosen.includes(k)) chosen.push(k);
        }
        const lims = chosen.flatMap((_, i) => [['LIMIT', i + 1, 60, r.pick([3, 6, 9])], ...(r.int(0, 1) ? [['LIMIT', i + 1, r.pick([1, 2]), r.pick([2, 4])]] : [])]);
        const tail = [now, 'COST', r.pick([1, 1, 2]), ...lims.flat(), ...extra];
        [command, touched] = [r.pick(['allowall', 'allowall', 'peekall']), chosen];
        send = (sw, p) => sw.callKeys(command, [chosen.length, ...chosen.map((k) => keys[p][k]), ...tail]);
      }
      const what = `seed ${seed} step ${step}: ${command} ${touched} ${extra.join(' ')}`;
      const t0 = await serverMs();
      const want = await outcome(send(module, 'm'));
      assert.deepEqual(await outcome(send(lua, 'l')), want, what);
      const t1 = await serverMs();
      if ((command === 'allow' || command === 'allowall') && Array.isArray(want) && want[0] === 1) {
        seen.admitted++;
        // Each side keeps the later of its expiries (contract, "Expiry"): they differ by at most
        // the widest bracket of the admissions since the key was made.
        for (const k of touched) slack[k] = Math.max(slack[k] ?? 0, t1 - t0);
      }
      for (let k = 0; k < 3; k++) {
        assert.deepEqual(await scores(keys.l[k]), await scores(keys.m[k]), `${what}: key ${k}`);
        const [atM, atL] = await Promise.all([c.call('PEXPIRETIME', keys.m[k]), c.call('PEXPIRETIME', keys.l[k])]);
        if (atM < 0 || atL < 0) {
          assert.equal(atL, atM, `${what}: key ${k} expiry`);
          delete slack[k];
        } else assert.ok(Math.abs(atM - atL) <= slack[k], `${what}: key ${k} expires at ${atM} and ${atL}`);
      }
    }
  } finally {
    await c.config('SET', 'slidingwindow.lateness', 0);
  }
  assert.ok(Object.values(seen).every((n) => n > 0), JSON.stringify(seen));
}

for (const lateness of [0, 20_000, 86_400_000]) {
  test(`LEASE, PRECISION, DETAIL and lateness ${lateness}: script and module agree`, () => runOptions(41 + (lateness % 97), lateness, 300));
}
