// Copyright (c) 2026, lockq developers
// This file is part of lockq, released under the PostgreSQL License
// (see LICENSE).

'use strict';
// Hand-off latency of lockq.acquire (test/t/308_pgbouncer.pl): for each
// label=DSN given after the admin DSN, ROUNDS times, B waits for a lock A
// holds, each on a pg.Client of its own through that DSN (mode node), or both
// through one pg.Pool of that DSN (mode node-pool); the time from A's call
// of release() to B's acquire() resolving is one sample.  The admin DSN
// (direct) sees B queued first.  Prints "<label> <mode> p50 p99 max" (ms).
const pg = require('pg');
const lockq = require('../lockq.js');

const ROUNDS = 40;
const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

async function connect(dsn) {
  const c = new pg.Client({ connectionString: dsn });
  await c.connect();
  return c;
}

async function rounds(admin, dsn, name, pooled) {
  const a = pooled ? new pg.Pool({ connectionString: dsn, max: 4 }) : await connect(dsn);
  const b = pooled ? a : await connect(dsn);
  const samples = [];
  for (let i = 0; i < ROUNDS; i++) {
    const held = await lockq.acquire(a, name);
    let t1 = 0;
    const waiting = lockq.acquire(b, name).then((lease) => { t1 = performance.now(); return lease; });
    for (;;) {
      const { rows } = await admin.query('SELECT count(*) = 1 AS q FROM lockq_waiters WHERE lock_id = $1', [name]);
      if (rows[0].q) break;
      await sleep(2);
    }
    await sleep(20); // and waiting (in lockq_await, or on NOTIFY)
    const t0 = performance.now();
    await held.release();
    const lease = await waiting;
    samples.push(t1 - t0);
    await lease.release();
  }
  await a.end();
  if (b !== a) await b.end();
  return samples;
}

async function main() {
  const [adminDsn, ...targets] = process.argv.slice(2);
  const admin = await connect(adminDsn);
  for (const target of targets) {
    const at = target.indexOf('=');
    const label = target.slice(0, at);
    for (const mode of ['node', 'node-pool']) {
      const samples = await rounds(admin, target.slice(at + 1), `handoff-${mode}-${label}`, mode === 'node-pool');
      const s = samples.sort((x, y) => x - y);
      const pick = (q) => s[Math.min(s.length - 1, Math.floor(q * s.length))];
      console.log(`${label} ${mode} ${pick(0.5).toFixed(2)} ${pick(0.99).toFixed(2)} ${s[s.length - 1].toFixed(2)}`);
    }
  }
  await admin.end();
}

main().catch((e) => { console.error(e); process.exit(1); });
