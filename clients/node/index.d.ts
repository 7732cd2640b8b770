/**
 * The clients the helper takes, by their shape (neither library is needed to compile against
 * these types): ioredis 5 (`Redis`, one with Sentinel options, or `Cluster`) or node-redis 5
 * (`createClient`, `createCluster`), connected.
 */
export interface IoredisClient {
  call(command: string, ...args: any[]): Promise<unknown>;
  on(event: 'error', listener: (err: Error) => void): unknown;
}
export interface NodeRedisClient {
  sendCommand(args: ReadonlyArray<string | Buffer>, options?: any): Promise<unknown>;
  on(event: 'error' | 'connect', listener: (...args: any[]) => void): unknown;
}
export interface NodeRedisCluster {
  sendCommand(firstKey: string | Buffer | undefined, isReadonly: boolean | undefined, args: ReadonlyArray<string | Buffer>, options?: any): Promise<unknown>;
  readonly masters: ReadonlyArray<unknown>;
  nodeClient(node: any): Promise<NodeRedisClient>;
  on(event: 'error', listener: (err: Error) => void): unknown;
}
export type Client = IoredisClient | NodeRedisClient | NodeRedisCluster;

/** At most `max` requests (weighted by cost) in any `window` seconds. */
export interface Limit {
  window: number;
  max: number;
}

export type LimitLike = Limit | [number, number];

export interface Result {
  allowed: boolean;
  /** Members in the binding limit's window after the call. */
  count: number;
  remaining: number;
  /** ms until a request of the same cost would be admitted; -1 if it never can be (cost > max). */
  retryAfterMs: number;
  /** ms until the binding limit's window is empty. */
  resetAfterMs: number;
  /** Index of the binding limit (0 with a single limit). */
  limit: number;
  /** With `detail`: every limit's state, in limit order (for several keys, the limits sent, key by key). */
  states?: LimitState[];
  /** With `detail`: the ms the call used (the server's clock for '*'). */
  now?: number;
  /** With onError 'open': the failure that let this request through unchecked. */
  error?: UnavailableError;
  /** With `confirm`, on an admitted call: whether the replicas acknowledged it. */
  confirmed?: boolean;
}

/** One limit's state after a call (DETAIL). */
export interface LimitState {
  count: number;
  remaining: number;
  /** -1: this cost never fits this limit. */
  retryAfterMs: number;
  resetAfterMs: number;
}

/** An allowAll / peekAll result; `limit` is the binding limit's position among all the limits sent. */
export interface AllResult extends Result {
  /** The key whose limit binds. */
  bindingKey: string;
  /** The binding limit itself. */
  bindingLimit: Limit;
}

/** Keys with their limits, in order: a Map, or a list of [key, limits] or {key, limits}. */
export type KeyedLimits =
  | Map<string, LimitLike | LimitLike[]>
  | ([string, LimitLike | LimitLike[]] | { key: string; limits: LimitLike | LimitLike[] })[];

/** One key of `top()`: `refused` is never below its true refusals and never above them by more than `error`. */
export interface TopEntry {
  key: string;
  refused: number;
  error: number;
}

/** One request in flight (`acquire`). */
export interface Slot {
  readonly allowed: boolean;
  readonly result: Result;
  /** Gives the slot back once; resolves to whether a member was taken back. */
  release(): Promise<boolean>;
}

/** What `Reservation.settle` did: refunded (reserved, unused), charged (excess admitted), overrun (excess refused: spent, reported). */
export interface Settlement {
  refunded: number;
  charged: number;
  overrun: number;
}

/** `n` requests charged before the real cost is known (`reserve`). */
export interface Reservation {
  readonly allowed: boolean;
  readonly result: Result;
  settle(used: number): Promise<Settlement>;
  /** Refunds the whole reservation; resolves to the requests taken back. */
  cancel(): Promise<number>;
}

export interface RefundOptions {
  /** Take back only requests logged at or before this Unix time in ms ('*': the server's clock). */
  at?: number | '*';
}

export interface CallOptions {
  cost?: number;
  /** Unix time in ms; default: the server's clock ('*'). */
  now?: number;
  /** LEASE ms: an admitted call's members are logged at now + ms. */
  lease?: number;
  /**
   * PRECISION p (ms, 1 <= p <= 2^53, else a TypeError before sending): an admitted call's members
   * are logged at now (or now + lease) rounded up to a multiple of p.
   */
  precision?: number;
  /** DETAIL: every limit's state and the now used. */
  detail?: boolean;
}

export interface Options {
  use?: 'auto' | 'module' | 'lua';
  /** ms the Lua path passes as the script's lateness; keep it equal to the servers' slidingwindow.lateness. */
  lateness?: number;
  /** ms a call waits for its reply; default 1000, 0 without bound. */
  timeout?: number;
  /** When Redis does not decide: 'closed' (default) rejects with UnavailableError, 'open' resolves admitted with `error`. */
  onError?: 'open' | 'closed';
  /** WAIT replicas timeoutMs after each admitted allow / allowAll, on the same connection. */
  confirm?: { replicas: number; timeoutMs: number };
  /** When fewer replicas acknowledged: 'deny' (default) refunds and answers refused, 'allow' answers admitted. */
  onUnconfirmed?: 'allow' | 'deny';
}

/** The helper's own errors; also a node-redis client never connected (or closed), which is not Redis being away. */
export declare class SlidingWindowError extends Error {}
/** Redis did not decide: unreachable, no reply in time, or READONLY, LOADING, OOM, ...; `cause` holds the failure. */
export declare class UnavailableError extends SlidingWindowError {}

export interface LeaseOptions {
  /** Permits one lease takes (its COST): from 1 to the smallest max of the limits. */
  size: number;
  /** How long a lease's permits are handed out (LEASE ms), an integer >= 1. */
  durationMs: number;
  /**
   * Unix ms (floored to whole ms): when given, every call of the lease passes it as its now (not the
   * server's clock), and the lease's end, its remembered refusals and the waits it runs down read it.
   */
  clock?: () => number;
}

export declare class Lease {
  /** Permits held in memory now. */
  readonly permits: number;
  /** One request: a permit from memory or from a new lease, the answer of a call, or a refusal remembered from a PEEK until its wait. */
  allow(): Promise<Result>;
  /** Gives the unused permits back; resolves to how many the server took back. */
  close(): Promise<number>;
}

export type LimitsArg = LimitLike | LimitLike[] | KeyedLimits;
export declare function secondsUp(ms: number): number;
export declare function policyHeader(limits: LimitsArg, names?: string[]): string;
export declare function rateLimitHeader(result: Result, names?: string[]): string;
export declare function retryAfterHeader(result: Result): string | null;
/** RateLimit-Policy and RateLimit, and Retry-After on a refusal; {} for an unchecked result. */
export declare function headers(result: Result, limits: LimitsArg, names?: string[]): Record<string, string>;

export declare const SCRIPT: string;
export declare const CROCKFORD: string;
/** `::ffff:a.b.c.d` in any spelling (an IPv4 client on a dual-stack socket) as `a.b.c.d`; IPv6 compressed and lowercase; anything else as is. */
export declare function canonicalIp(address: string): string;
export declare function toArgs(limits: LimitLike | LimitLike[], cost?: number, now?: number, options?: { lease?: number; precision?: number; detail?: boolean }): (string | number)[];
export declare function toKeyArgs(keyed: KeyedLimits, cost?: number, now?: number, options?: { lease?: number; precision?: number; detail?: boolean }): {
  args: (string | number)[];
  named: { key: string; limit: Limit }[];
};
export declare function toResult(reply: number[]): Result;

export declare class SlidingWindow {
  constructor(redis: Client, options?: Options);
  usesModule(): Promise<boolean>;
  allow(key: string, limits: LimitLike | LimitLike[], options?: CallOptions): Promise<Result>;
  peek(key: string, limits: LimitLike | LimitLike[], options?: CallOptions): Promise<Result>;
  allowAll(keyed: KeyedLimits, options?: CallOptions): Promise<AllResult>;
  peekAll(keyed: KeyedLimits, options?: CallOptions): Promise<AllResult>;
  /** Resolves to the number of logged requests taken back. */
  refund(key: string, n?: number, options?: RefundOptions): Promise<number>;
  /** The keys refused most since the servers' last SLIDINGWINDOW.TOPRESET (every master of a Cluster, summed); needs the module. */
  top(count?: number): Promise<TopEntry[]>;
  /** A slot among `limit` in flight on `key`, held at most `hold` seconds; release() gives it back. */
  acquire(key: string, limit: number, hold: number): Promise<Slot>;
  /** `n` requests charged now for a cost known later: settle(used) or cancel(). */
  reserve(key: string, limits: LimitLike | LimitLike[], n: number): Promise<Reservation>;
  lease(key: string, limits: LimitLike | LimitLike[], options: LeaseOptions): Lease;
  call(command: 'allow' | 'peek', key: string, args: (string | number | Buffer)[]): Promise<number[]>;
  call(command: 'refund', key: string, args: (string | number | Buffer)[]): Promise<number>;
  callKeys(command: 'allowall' | 'peekall', args: (string | number | Buffer)[]): Promise<number[]>;
}
