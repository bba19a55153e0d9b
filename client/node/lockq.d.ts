// Copyright (c) 2026, lockq developers
// This file is part of lockq, released under the PostgreSQL License
// (see LICENSE).

// Types of lockq for Node.js (lockq.js).  Sources are duck-typed, so that a
// pg.Pool or pg.Client of the application's own copy of pg is accepted:
// these interfaces name what lockq uses of them.

/** What lockq uses of a pg.Pool. */
export interface PoolLike {
  query(text: string, values?: unknown[]): Promise<{ rows: any[] }>;
  connect(): Promise<unknown>;
  readonly totalCount: number;
  readonly idleCount: number;
  readonly options?: object;
}

/** What lockq uses of a pg.Client. */
export interface ClientLike {
  query(text: string, values?: unknown[]): Promise<{ rows: any[] }>;
  connect(): Promise<void>;
  on(event: string, listener: (...args: any[]) => void): unknown;
}

export type Source = PoolLike | ClientLike;

/** Durations are milliseconds. */
export interface LockOptions {
  /** The lease (default 30000), renewed every ttl/3 unless autoRenew is false. */
  ttl?: number;
  /** undefined: wait forever; 0: never wait (lockq_try); else give up after this long. */
  timeout?: number;
  /** The wait's liveness bound on the server (default 10000). */
  heartbeat?: number;
  /** Default: unique per lease (host:pid:thread:random). */
  owner?: string;
  /** Renew at ttl/3 while held (default true). */
  autoRenew?: boolean;
  /** Cancels the wait. */
  signal?: AbortSignal;
  /** The longest one statement may go unanswered (default 10000). */
  ioTimeout?: number;
}

/** A held (or lost) lease. */
export class Lease {
  private constructor();
  readonly lockId: string;
  readonly owner: string;
  /** The fencing token. */
  readonly token: bigint;
  /** Aborted (reason LockLostError) when the lease is lost; consults the clock. */
  readonly signal: AbortSignal;
  /** Not lost, released, nor past its local deadline. */
  readonly held: boolean;
  /** Milliseconds until the local deadline; 0 once not held. */
  readonly remaining: number;
  /** Renews now for ttl (default: the lease's), which later renewals keep. */
  extend(ttl?: number): Promise<void>;
  /** Releases the lock; true if the lease was held until then. */
  release(): Promise<boolean>;
  /** Stops renewing and watching without releasing: the grant stays until its lease ends. */
  forget(): void;
}

export class LockError extends Error {}
/** Not granted within the timeout (nothing is left queued). */
export class LockTimeoutError extends LockError {}
/** The lease ended before it was released. */
export class LockLostError extends LockError {}

export interface Notice {
  event: 'grant' | 'lost' | 'dropped';
  token: bigint;
  lockId: string;
  owner: string;
}

/** The oldest lockq extension this client works with. */
export const MIN_EXTVERSION: string;

/** Waits for lockId and returns a held Lease. */
export function acquire(source: Source, lockId: string, opts?: LockOptions): Promise<Lease>;

/** Runs fn holding lockId and releases it when fn settles; returns fn's result. */
export function using<T>(source: Source, lockId: string, opts: LockOptions,
  fn: (signal: AbortSignal, lease: Lease) => Promise<T> | T): Promise<T>;
export function using<T>(source: Source, lockId: string,
  fn: (signal: AbortSignal, lease: Lease) => Promise<T> | T): Promise<T>;

/** Parses a lockq NOTIFY payload; null if it is not one. */
export function parseNotice(payload: string): Notice | null;
