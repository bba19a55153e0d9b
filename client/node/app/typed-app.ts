// Copyright (c) 2026, lockq developers
// This file is part of lockq, released under the PostgreSQL License
// (see LICENSE).

// An application of lockq's TypeScript declarations, checked with
// tsc --strict against the installed package (TAP 402_node): a type that
// changed, or a declaration that went missing, fails the check.
import * as lockq from 'lockq';

declare const pool: lockq.PoolLike;
declare const client: lockq.ClientLike;

export async function work(): Promise<bigint> {
  const lease: lockq.Lease = await lockq.acquire(pool, 'typed:app', { ttl: 30000, timeout: 5000 });
  const left: number = lease.remaining;
  await lease.extend(60000);
  const held: boolean = lease.held;
  const released: boolean = await lease.release();
  const other: lockq.Lease = await lockq.acquire(pool, 'typed:other');
  other.forget();
  console.log(left, held, released);

  const n: number = await lockq.using(client, 'typed:app', { ttl: 10000 }, async (signal, l) => {
    signal.throwIfAborted();
    return l.token > 0n ? 1 : 0;
  });
  const s: string = await lockq.using(pool, 'typed:app', (_signal, l) => l.owner);
  console.log(n, s, lockq.MIN_EXTVERSION);

  const notice: lockq.Notice | null = lockq.parseNotice('grant 1 1 x o');
  try {
    await lockq.acquire(pool, 'typed:app', { timeout: 0 });
  } catch (e) {
    if (e instanceof lockq.LockTimeoutError || e instanceof lockq.LockLostError) console.log(e.message);
  }
  return notice === null ? 0n : notice.token;
}
