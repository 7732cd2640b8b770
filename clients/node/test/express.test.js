'use strict';
// The README's Express example, as written, on each client and path: its code block is run with
// `redis`'s createClient pointed at a test server (for ioredis, answering an ioredis client
// instead) and its app listening on a free loopback port; requests from one address until the
// first 429.

const { test, before, after, describe } = require('node:test');
const assert = require('node:assert/strict');
const fs = require('node:fs');
const path = require('node:path');
const Redis = require('ioredis');
const nodeRedis = require('redis');
const { CLIENT_PATHS, startServer } = require('./server');

const README = fs.readFileSync(path.join(__dirname, '..', 'README.md'), 'utf8');
const EXAMPLE = /^## Express\n[\s\S]*?```js\n([\s\S]*?)```/m.exec(README)[1];

/**
 * Runs the example with `require` answering the test's modules: `redis` whose createClient makes a
 * client of `kind` to `port`, express whose listen takes a free port (resolved with the server).
 */
function runExample(kind, port) {
  const clients = [];
  let listening;
  const serverUp = new Promise((resolve) => {
    listening = resolve;
  });
  const createClient = () => {
    const c = kind === 'ioredis'
      ? new Redis({ host: '127.0.0.1', port, lazyConnect: true })
      : nodeRedis.createClient({ socket: { host: '127.0.0.1', port } });
    clients.push(c);
    return c;
  };
  const express = () => {
    const app = require('express')();
    app.listen = () => {
      const server = require('node:http').createServer(app);
      server.listen(0, '127.0.0.1', () => listening(server));
      return server;
    };
    return app;
  };
  const modules = { express, redis: { createClient }, slidingwindow: require('..') };
  new Function('require', EXAMPLE)((name) => modules[name]);
  return { serverUp, clients };
}

for (const [kind, which] of CLIENT_PATHS) {
  describe(`${kind}, ${which} path: the README's Express example`, () => {
    let redis;
    let example;
    let server;
    before(async () => {
      redis = await startServer({ withModule: which === 'module' });
      example = runExample(kind, redis.port);
      server = await example.serverUp;
    });
    after(async () => {
      server.close();
      for (const c of example.clients) (kind === 'ioredis' ? c.disconnect() : c.destroy());
      await redis.close();
    });

    test('admits, then answers 429 with the headers and the body', async () => {
      const url = `http://127.0.0.1:${server.address().port}/`;
      const admitted = [];
      let refused = null;
      // The 60 s limit of 100 refuses the 101st at the latest.
      for (let i = 0; i <= 100 && refused === null; i++) {
        const res = await fetch(url);
        if (res.status === 200) admitted.push([await res.text(), res.headers.get('ratelimit-policy'), res.headers.get('ratelimit')]);
        else refused = { status: res.status, body: await res.json(), retry: res.headers.get('retry-after'), policy: res.headers.get('ratelimit-policy') };
      }
      assert.ok(admitted.length >= 10, `${admitted.length} admitted`);
      assert.deepEqual(admitted[0], ['ok', '"l0";q=10;w=1,"l1";q=100;w=60', '"l0";r=9;t=1']);
      assert.ok(refused !== null, 'no 429 in 101 requests');
      assert.deepEqual([refused.status, refused.body, refused.policy], [429, { error: 'rate limited' }, '"l0";q=10;w=1,"l1";q=100;w=60']);
      assert.match(refused.retry, /^[1-9][0-9]*$/);
      const c = redis.client();
      assert.equal(await c.zcard('rl:{127.0.0.1}'), admitted.length);
    });
  });
}
