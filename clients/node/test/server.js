'use strict';
// Real redis-server processes for the tests, with or without the module, each on a free loopback
// port in a fresh directory, and clients to them: ioredis and node-redis. Binaries: $REDIS_SERVER (else redis-server on PATH); module:
// $SLIDINGWINDOW_MODULE, else the release build at the repository root.

const { spawn } = require('node:child_process');
const fs = require('node:fs');
const net = require('node:net');
const os = require('node:os');
const path = require('node:path');
const { randomUUID } = require('node:crypto');
const Redis = require('ioredis');
const nodeRedis = require('redis');

/** The clients the helper takes, by name: every test that sends through the helper runs on each. */
const CLIENTS = ['ioredis', 'node-redis'];

/** Every client on every path: [client, 'module' | 'lua']. */
const CLIENT_PATHS = CLIENTS.flatMap((kind) => ['module', 'lua'].map((which) => [kind, which]));

/**
 * An app's client of `kind` to 127.0.0.1:`port`, connected, with its library's defaults (retries,
 * the offline queue) unless `options` (ioredis's) say otherwise.
 */
async function appClient(kind, port, options = {}) {
  if (kind === 'ioredis') return new Redis({ host: '127.0.0.1', port, ...options });
  if (kind !== 'node-redis') throw new Error(`unknown client ${kind}`);
  const c = nodeRedis.createClient({ socket: { host: '127.0.0.1', port } });
  await c.connect();
  return c;
}

/** Closes a client of either kind at once. */
function closeClient(c) {
  if (typeof c.call === 'function') c.disconnect();
  else if (c.isOpen) c.destroy();
}

const REPO = path.resolve(__dirname, '../../..');
const STARTUP_DEADLINE_MS = 10_000;

function modulePath() {
  const p = process.env.SLIDINGWINDOW_MODULE || path.join(REPO, 'target/release/libslidingwindow.so');
  if (!fs.existsSync(p)) throw new Error(`module ${p} not found: run \`cargo build --release\` (or set SLIDINGWINDOW_MODULE)`);
  return fs.realpathSync(p);
}

function listenOn(port) {
  return new Promise((resolve, reject) => {
    const srv = net.createServer();
    srv.on('error', reject);
    srv.listen(port, '127.0.0.1', () => {
      const { port } = srv.address();
      srv.close(() => resolve(port));
    });
  });
}

// A free loopback port; with `bus`, one whose cluster bus port (+10000, at most 65535) is free too
// (a cluster node on another port exits at start).
async function freePort(bus = false) {
  for (let i = 0; i < 100; i++) {
    const port = await listenOn(0);
    if (!bus) return port;
    if (port > 65535 - 10000) continue;
    try {
      await listenOn(port + 10000);
      return port;
    } catch {
      // taken: try another
    }
  }
  throw new Error('no free port with a free port + 10000 after 100 tries');
}

function client(port) {
  // No retries: a test that loses its server should fail, not wait.
  return new Redis({ host: '127.0.0.1', port, maxRetriesPerRequest: 0, retryStrategy: () => null, lazyConnect: true });
}

async function ping(port) {
  const c = client(port);
  c.on('error', () => {}); // refused while the server starts: the poll answers false
  try {
    await c.connect();
    return (await c.ping()) === 'PONG';
  } catch {
    return false;
  } finally {
    c.disconnect();
  }
}

/** Starts a server; `close()` kills it and removes its directory. `extra`: more server arguments. */
async function startServer({ withModule, extra = [] }) {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'slidingwindow-node-'));
  let lastLog = '';
  // The probed port may be taken before redis binds it: try a few.
  for (let attempt = 0; attempt < 5; attempt++) {
    const port = await freePort(extra.includes('--cluster-enabled'));
    // A replica's full sync starts at once, not after the default 5 s.
    const args = ['--port', String(port), '--bind', '127.0.0.1', '--dir', dir, '--save', '', '--appendonly', 'no', '--logfile', 'redis.log', '--repl-diskless-sync-delay', '0'];
    if (withModule) args.push('--loadmodule', modulePath());
    args.push(...extra);
    const proc = spawn(process.env.REDIS_SERVER || 'redis-server', args, { stdio: 'ignore' });
    let exited = false;
    proc.on('exit', () => { exited = true; });
    const deadline = Date.now() + STARTUP_DEADLINE_MS;
    while (!exited && Date.now() < deadline) {
      if (await ping(port)) {
        const clients = [];
        return {
          port,
          client() {
            const c = new Redis({ host: '127.0.0.1', port, maxRetriesPerRequest: 0 });
            clients.push(c);
            return c;
          },
          /** A client of `kind` (CLIENTS), closed with the server. */
          async connect(kind) {
            if (kind === 'ioredis') return this.client();
            const c = await appClient(kind, port);
            clients.push(c);
            return c;
          },
          async close() {
            for (const c of clients) closeClient(c);
            proc.kill('SIGKILL');
            fs.rmSync(dir, { recursive: true, force: true });
          },
        };
      }
      await new Promise((r) => setTimeout(r, 10));
    }
    proc.kill('SIGKILL');
    lastLog = fs.existsSync(path.join(dir, 'redis.log')) ? fs.readFileSync(path.join(dir, 'redis.log'), 'utf8').slice(-4000) : '';
  }
  throw new Error(`redis-server did not start:\n${lastLog}`);
}

/**
 * Three masters made into a Redis Cluster as `redis-cli --cluster create` makes one, with or
 * without the module; resolves once every node says cluster_state:ok.
 * `client()` is an ioredis Redis.Cluster seeded with every node, `connect(kind)` one of `kind`
 * (CLIENTS); `nodes` the plain servers.
 */
async function startCluster({ withModule }) {
  const nodes = [];
  for (let i = 0; i < 3; i++) nodes.push(await startServer({ withModule, extra: ['--cluster-enabled', 'yes', '--cluster-node-timeout', '5000'] }));
  const direct = nodes.map((n) => n.client());
  // What `redis-cli --cluster create` does, without its waits of a second: a config epoch each, a
  // third of the slots each (its ranges), a MEET of each node to the first.
  const ranges = [[0, 5460], [5461, 10922], [10923, 16383]];
  for (let i = 0; i < 3; i++) {
    await direct[i].call('CLUSTER', 'SET-CONFIG-EPOCH', String(i + 1));
    await direct[i].call('CLUSTER', 'ADDSLOTSRANGE', String(ranges[i][0]), String(ranges[i][1]));
  }
  for (const c of direct.slice(1)) await c.call('CLUSTER', 'MEET', '127.0.0.1', String(nodes[0].port));
  const deadline = Date.now() + 30_000;
  for (;;) {
    const states = await Promise.all(direct.map((c) => c.call('CLUSTER', 'INFO')));
    if (states.every((s) => /cluster_state:ok/.test(s))) break;
    if (Date.now() > deadline) throw new Error(`the cluster did not come up:\n${states.join('\n')}`);
    await new Promise((r) => setTimeout(r, 50));
  }
  const clients = [];
  return {
    nodes,
    direct,
    client() {
      const c = new Redis.Cluster(nodes.map((n) => ({ host: '127.0.0.1', port: n.port })), {
        redisOptions: { maxRetriesPerRequest: 0 },
      });
      clients.push(c);
      return c;
    },
    async connect(kind) {
      if (kind === 'ioredis') return this.client();
      const c = nodeRedis.createCluster({ rootNodes: nodes.map((n) => ({ socket: { host: '127.0.0.1', port: n.port } })) });
      await c.connect();
      clients.push(c);
      return c;
    },
    async close() {
      for (const c of clients) closeClient(c);
      for (const n of nodes) await n.close();
    },
  };
}

/** A server for a path's tests ('module': with the module; 'lua': without) and a client to it. */
async function pathServer(path) {
  const server = await startServer({ withModule: path === 'module' });
  return { server, c: server.client() };
}

/** A key no other test uses. */
const newKey = () => `rl:{${randomUUID()}}`;

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

/** The module's calls by command (INFO commandstats), or, where the script ran, { script: n }:
 * its EVALSHA and EVAL calls. A command never called has no entry. */
async function calls(c) {
  const stats = await c.info('commandstats');
  const named = {};
  let script = 0;
  for (const [, name, n] of stats.matchAll(/cmdstat_(slidingwindow\.\w+|evalsha|eval):calls=(\d+)/g)) {
    if (name.startsWith('slidingwindow.')) named[name.slice('slidingwindow.'.length)] = Number(n);
    else script += Number(n);
  }
  return script ? { script } : named;
}

module.exports = { CLIENTS, CLIENT_PATHS, appClient, closeClient, startServer, startCluster, pathServer, newKey, busiest, calls };
