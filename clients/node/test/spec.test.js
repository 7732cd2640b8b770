'use strict';
// The shared spec (spec/cases.json, made from the contract's model): every call through the
// helper's raw calls, on both paths (module and script) and both clients (ioredis, node-redis),
// each reply and error exactly.

const { test, before, after, describe } = require('node:test');
const assert = require('node:assert/strict');
const fs = require('node:fs');
const path = require('node:path');
const { randomUUID } = require('node:crypto');
const { SlidingWindow } = require('..');
const { CLIENT_PATHS, startServer } = require('./server');

const spec = JSON.parse(fs.readFileSync(path.join(__dirname, '..', '..', '..', 'spec', 'cases.json'), 'utf8'));

/** Integers as numbers, arrays as arrays (both clients answer numbers already). */
const plain = (v) => (Array.isArray(v) ? v.map(plain) : Number(v));

for (const [kind, which] of CLIENT_PATHS) {
  describe(`${kind}, ${which} path: the shared spec`, () => {
    let server;
    let sw;
    before(async () => {
      server = await startServer({ withModule: which === 'module' });
      sw = new SlidingWindow(await server.connect(kind));
    });
    after(() => server.close());

    test('every case', async () => {
      const run = ([command, ...args]) => {
        const name = command.toLowerCase();
        if (name === 'allowall' || name === 'peekall') return sw.callKeys(name, args);
        return sw.call(name, args[0], args.slice(1));
      };
      let calls = 0;
      for (const [i, c] of spec.cases.entries()) {
        const tag = `{${randomUUID()}-${i}}`;
        for (const call of c.calls) {
          const argv = call.argv.map((w) => w.replaceAll('{t}', tag));
          if (call.error !== undefined) {
            const err = await run(argv).then(() => null, (e) => e);
            assert.ok(err, `${c.name}: ${argv.join(' ')} answered`);
            assert.equal(err.message, call.error, `${c.name}: ${argv.join(' ')}`);
          } else {
            assert.deepEqual(plain(await run(argv)), call.reply, `${c.name}: ${argv.join(' ')}`);
          }
          calls++;
        }
      }
      assert.ok(calls > 400);
    });
  });
}
