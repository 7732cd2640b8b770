// Smoke test of the installed Node package (scripts/test-packages.sh runs it in a clean folder
// where the packed tarball and one client, ioredis or node-redis, were installed): the version it
// was packed as, then three calls of a limit of 2 on a server with the module (SLIDINGWINDOW.ALLOW)
// and on one without (the packaged Lua script), through that client.
// Usage: node smoke.js VERSION MODULE_PORT PLAIN_PORT ioredis|redis
'use strict';
const assert = require('node:assert/strict');
const { SlidingWindow } = require('slidingwindow');

/** A connected client of the package `lib` (the only one installed), and how to read and close it. */
async function connect(lib, port) {
  if (lib === 'ioredis') {
    const Redis = require('ioredis');
    const redis = new Redis({ host: '127.0.0.1', port, lazyConnect: true });
    await redis.connect();
    return { redis, info: (section) => redis.info(section), close: () => redis.disconnect() };
  }
  if (lib !== 'redis') throw new Error(`unknown client package ${lib}`);
  const redis = require('redis').createClient({ socket: { host: '127.0.0.1', port } });
  await redis.connect();
  return { redis, info: (section) => redis.info(section), close: () => redis.destroy() };
}

async function main() {
  const [version, modulePort, plainPort, lib] = process.argv.slice(2);
  assert.equal(require('slidingwindow/package.json').version, version);
  const where = require.resolve('slidingwindow');
  assert.ok(where.startsWith(`${process.cwd()}/node_modules/`), `resolved to ${where}`);
  for (const [port, command] of [[modulePort, 'slidingwindow.allow'], [plainPort, 'evalsha']]) {
    const { redis, info, close } = await connect(lib, Number(port));
    const sw = new SlidingWindow(redis);
    const key = `smoke:{node}:${require('node:crypto').randomUUID()}`;
    const got = [];
    for (let i = 0; i < 3; i++) got.push(await sw.allow(key, { window: 60, max: 2 }));
    assert.deepEqual(got.map((g) => g.allowed), [true, true, false]);
    assert.deepEqual(got.map((g) => g.remaining), [1, 0, 0]);
    assert.ok(got[2].retryAfterMs > 0, JSON.stringify(got[2]));
    const stats = await info('commandstats');
    assert.ok(stats.includes(`cmdstat_${command}:`), stats);
    console.log(`smoke.js: ${lib}, port ${port}: allowed, allowed, refused through ${command}`);
    close();
  }
  console.log(`smoke.js: slidingwindow ${version} from ${where}: ok`);
}
main().catch((e) => { console.error(e); process.exit(1); });
