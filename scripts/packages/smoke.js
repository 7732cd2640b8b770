// Smoke test of the installed Node package (scripts/test-packages.sh runs it in a clean folder
// where the packed tarball and ioredis were installed): the version it was packed as, then three
// calls of a limit of 2 on a server with the module (SLIDINGWINDOW.ALLOW) and on one without (the
// packaged Lua script). Usage: node smoke.js VERSION MODULE_PORT PLAIN_PORT
'use strict';
const assert = require('node:assert/strict');
const Redis = require('ioredis');
const { SlidingWindow } = require('slidingwindow');

async function main() {
  const [version, modulePort, plainPort] = process.argv.slice(2);
  assert.equal(require('slidingwindow/package.json').version, version);
  const where = require.resolve('slidingwindow');
  assert.ok(where.startsWith(`${process.cwd()}/node_modules/`), `resolved to ${where}`);
  for (const [port, command] of [[modulePort, 'slidingwindow.allow'], [plainPort, 'evalsha']]) {
    const redis = new Redis({ host: '127.0.0.1', port: Number(port), lazyConnect: true });
    await redis.connect();
    const sw = new SlidingWindow(redis);
    const key = `smoke:{node}:${require('node:crypto').randomUUID()}`;
    const got = [];
    for (let i = 0; i < 3; i++) got.push(await sw.allow(key, { window: 60, max: 2 }));
    assert.deepEqual(got.map((g) => g.allowed), [true, true, false]);
    assert.deepEqual(got.map((g) => g.remaining), [1, 0, 0]);
    assert.ok(got[2].retryAfterMs > 0, JSON.stringify(got[2]));
    const stats = await redis.info('commandstats');
    assert.ok(stats.includes(`cmdstat_${command}:`), stats);
    console.log(`smoke.js: port ${port}: allowed, allowed, refused through ${command}`);
    redis.disconnect();
  }
  console.log(`smoke.js: slidingwindow ${version} from ${where}: ok`);
}
main().catch((e) => { console.error(e); process.exit(1); });
