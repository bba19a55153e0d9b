// Copyright (c) 2026, lockq developers
// This file is part of lockq, released under the PostgreSQL License
// (see LICENSE).

// A fresh application that installed lockq from its npm pack tarball next
// to its own pg (TAP 402_node): both kinds of source, extend, remaining,
// using, and the debug log of a lost lease.  Prints what it saw; exits 1
// on a failure.
'use strict';
const assert = require('node:assert');
const path = require('node:path');
const pg = require('pg');
const lockq = require('lockq');

async function main() {
  const dsn = process.env.LOCKQ_TEST_DSN;
  // one pg: lockq uses the application's, it brings none of its own
  const lockqDir = path.dirname(require.resolve('lockq'));
  assert.strictEqual(require.resolve('pg', { paths: [lockqDir] }), require.resolve('pg'));
  const pool = new pg.Pool({ connectionString: dsn, max: 2 });
  const client = new pg.Client({ connectionString: dsn });
  await client.connect();

  const lease = await lockq.acquire(pool, 'app:pool', { ttl: 2000, autoRenew: false });
  assert.ok(lease.remaining > 1000 && lease.remaining <= 2000, `remaining ${lease.remaining}`);
  await lease.extend(60000);
  assert.ok(lease.remaining > 55000, `remaining after extend ${lease.remaining}`);
  const { rows } = await client.query(
    "SELECT expires > now() + interval '50 s' AS ok FROM lockq.lockq_locks WHERE lock_id = 'app:pool'");
  assert.ok(rows[0].ok, 'the server has the extended lease');
  assert.strictEqual(await lease.release(), true);
  assert.strictEqual(lease.remaining, 0);
  console.log('pool: acquired, extended, released');

  const token = await lockq.using(client, 'app:client', { ttl: 5000 }, async (signal, l) => {
    const r = await client.query('SELECT lockq.lockq_holds($1, $2) AS ok', ['app:client', l.token.toString()]);
    assert.ok(r.rows[0].ok);
    return l.token;
  });
  console.log(`client: using ran with token ${typeof token}`);

  const lost = await lockq.acquire(pool, 'app:lost', { ttl: 60000 });
  await client.query("SELECT lockq.lockq_force_release('app:lost')");
  // the lost notice can be confirmed before this line runs: an 'abort'
  // listener added after the abort would never be called
  await new Promise((resolve) => (lost.signal.aborted ? resolve() : lost.signal.addEventListener('abort', resolve)));
  await assert.rejects(lost.extend(), lockq.LockLostError);
  assert.strictEqual(await lost.release(), false);
  console.log('lost: signalled');

  await client.end();
  await pool.end();
}

main().then(() => console.log('app done'), (e) => { console.error(e); process.exit(1); });
