import type { Redis, Cluster } from 'ioredis';

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

export interface RefundOptions {
  /** Take back only requests logged at or before this Unix time in ms ('*': the server's clock). */
  at?: number | '*';
}

export interface CallOptions {
  cost?: number;
  /** Unix time in ms; default: the server's clock. */
  now?: number;
}

export declare const SCRIPT: string;
export declare const CROCKFORD: string;
/** `::ffff:a.b.c.d` (an IPv4 client on a dual-stack socket) as `a.b.c.d`; any other address as is. */
export declare function canonicalIp(address: string): string;
export declare function toArgs(limits: LimitLike | LimitLike[], cost?: number, now?: number): (string | number)[];
export declare function toKeyArgs(keyed: KeyedLimits, cost?: number, now?: number): {
  args: (string | number)[];
  named: { key: string; limit: Limit }[];
};
export declare function toResult(reply: number[]): Result;

export declare class SlidingWindow {
  constructor(redis: Redis | Cluster, options?: { use?: 'auto' | 'module' | 'lua' });
  usesModule(): Promise<boolean>;
  allow(key: string, limits: LimitLike | LimitLike[], options?: CallOptions): Promise<Result>;
  peek(key: string, limits: LimitLike | LimitLike[], options?: CallOptions): Promise<Result>;
  allowAll(keyed: KeyedLimits, options?: CallOptions): Promise<AllResult>;
  peekAll(keyed: KeyedLimits, options?: CallOptions): Promise<AllResult>;
  /** Resolves to the number of logged requests taken back. */
  refund(key: string, n?: number, options?: RefundOptions): Promise<number>;
  call(command: 'allow' | 'peek', key: string, args: (string | number | Buffer)[]): Promise<number[]>;
  call(command: 'refund', key: string, args: (string | number | Buffer)[]): Promise<number>;
  callKeys(command: 'allowall' | 'peekall', args: (string | number | Buffer)[]): Promise<number[]>;
}
