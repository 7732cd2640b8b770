'use strict';
// The client the user passes, as the helper talks to it: ioredis 5 (Redis, one with Sentinel
// options, or Cluster) or node-redis 5 (`createClient`, `createCluster`). Each sends one command
// with its keys named (a cluster sends it to the node of their slot) within a timeout, sends a
// command to every master of a cluster, keeps its last connection error and says which connection
// it is on. One client has one of these, however many helpers share it.
// Failures come back as the client raised them; the limiter decides what they mean.

/**
 * The Command class of the client's own ioredis (a linked copy of this folder cannot require the
 * app's): `call` run on a stand-in whose sendCommand keeps the command it is given, sending nothing.
 */
function commandClass(redis) {
  let found = null;
  const probe = Object.create(redis, {
    options: { value: { ...redis.options, enableAutoPipelining: false } },
    sendCommand: {
      value: (command) => {
        found = command.constructor;
        return Promise.resolve();
      },
    },
  });
  redis.call.call(probe, 'PING');
  return found;
}

/** Rejects with a timeout error once `ms` pass (`ms` 0: never). */
function withTimeout(promise, ms) {
  if (!(ms > 0)) return promise;
  let timer;
  const late = new Promise((_, reject) => {
    timer = setTimeout(() => reject(new Error('Command timed out')), ms);
  });
  return Promise.race([promise, late]).finally(() => clearTimeout(timer));
}

/**
 * Both clients report a lost connection as an 'error' event (ioredis prints "Unhandled error
 * event" when nobody listens, and node-redis's EventEmitter throws): one listener per client keeps
 * the last one.
 */
class Connection {
  constructor(redis) {
    this.redis = redis;
    this.lastError = null;
    redis.on('error', (err) => {
      this.lastError = err;
    });
  }
}

class Ioredis extends Connection {
  constructor(redis) {
    super(redis);
    this.isCluster = redis.isCluster === true;
  }

  /**
   * ioredis does not know a module command's keys: they are named on the command, so that a
   * Cluster sends the call straight to the node of their slot.
   */
  send([name, ...args], keys, timeout) {
    if (this.Command === undefined) this.Command = commandClass(this.redis);
    if (this.Command === null) return withTimeout(this.redis.call(name, ...args), timeout);
    const sent = new this.Command(name, args, { replyEncoding: 'utf8' });
    sent.keys = keys;
    if (timeout > 0) sent.setTimeout(timeout);
    return this.redis.sendCommand(sent);
  }

  /** One function per master of a Cluster that sends it a command within the timeout. */
  async masters() {
    return this.redis.nodes('master').map((node) => ([name, ...args], timeout) => withTimeout(node.call(name, ...args), timeout));
  }

  /** The connection commands go out on now (a reconnection makes a new one). */
  connection() {
    return this.redis.stream;
  }
}

/**
 * One command to a node-redis client (strings and Buffers only) within `timeout`: node-redis's own
 * timeout drops a command not yet written (a queued one is never sent late), and ends there; the
 * reply of one written is waited for here.
 */
function nodeSend(client, argv, timeout) {
  const words = argv.map((w) => (Buffer.isBuffer(w) ? w : String(w)));
  return withTimeout(client.sendCommand(words, timeout > 0 ? { timeout } : undefined), timeout);
}

class NodeRedis extends Connection {
  constructor(redis) {
    super(redis);
    this.isCluster = false;
    this.connects = 0;
    redis.on('connect', () => {
      this.connects++;
    });
  }

  send(argv, keys, timeout) {
    return nodeSend(this.redis, argv, timeout);
  }

  connection() {
    return this.connects;
  }
}

class NodeRedisCluster extends Connection {
  constructor(redis) {
    super(redis);
    this.isCluster = true;
  }

  /** Sent to the master of the first key's slot (any node for a command without keys). */
  send(argv, keys, timeout) {
    return nodeSend({ sendCommand: (words, options) => this.redis.sendCommand(keys[0], false, words, options) }, argv, timeout);
  }

  async masters() {
    const clients = await Promise.all(this.redis.masters.map((m) => this.redis.nodeClient(m)));
    return clients.map((client) => (argv, timeout) => nodeSend(client, argv, timeout));
  }

  connection() {
    return null;
  }
}

/** The connection of each client passed so far. */
const made = new WeakMap();

/** The connection for the client the user passes (one per client); a TypeError for anything else. */
function connect(redis) {
  if (!made.has(redis)) made.set(redis, connectNew(redis));
  return made.get(redis);
}

function connectNew(redis) {
  if (typeof redis?.call === 'function' && typeof redis.on === 'function') return new Ioredis(redis);
  if (typeof redis?.sendCommand === 'function' && typeof redis.on === 'function') {
    if (typeof redis.getMasterNode === 'function') {
      throw new TypeError('a node-redis Sentinel client is not supported: pass an ioredis client with Sentinel options, or a node-redis client of the master');
    }
    if (Array.isArray(redis.masters) && typeof redis.nodeClient === 'function') return new NodeRedisCluster(redis);
    return new NodeRedis(redis);
  }
  throw new TypeError('redis must be an ioredis 5 client (Redis or Cluster) or a node-redis 5 client (createClient or createCluster)');
}

/** Whether `err` is of a class named `name`, or of a subclass of one (the app's copy of a client may not be ours). */
function isA(err, name) {
  for (let p = Object.getPrototypeOf(err ?? {}); p !== null; p = Object.getPrototypeOf(p)) {
    if (p.constructor?.name === name) return true;
  }
  return false;
}

/** Whether an error is Redis's error reply (ioredis's ReplyError, node-redis's ErrorReply and its subclasses). */
const isReply = (err) => err?.name === 'ReplyError' || isA(err, 'ErrorReply');

/** What a failure says (node-redis's TimeoutError says nothing: ioredis's words for it). */
const reason = (err) => err?.message || (isA(err, 'TimeoutError') ? 'Command timed out' : String(err?.constructor?.name ?? err));

/** Whether node-redis refused the call because the app never connected the client, or closed it. */
const isClosed = (err) => isA(err, 'ClientClosedError');

module.exports = { connect, isReply, isClosed, reason };
