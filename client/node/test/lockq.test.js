// Copyright (c) 2026, lockq developers
// This file is part of lockq, released under the PostgreSQL License
// (see LICENSE).

'use strict';
// lockq.js against a real server (LOCKQ_TEST_DSN, set by test/t/402_node.pl):
// FIFO, timeout, abort, renewals, lost leases, fencing, release on throw,
// with a pg.Pool and with a pg.Client; and the NOTIFY payload parser.
const { describe, it, before, after } = require('node:test');
const assert = require('node:assert/strict');
const { setTimeout: sleep } = require('node:timers/promises');
const pg = require('pg');
const lockq = require('../lockq.js');

const DSN = process.env.LOCKQ_TEST_DSN;
const PATIENCE = 30000;

describe('brokenBy: which errors a pooled statement is tried again after', () => {
  it('a system error whose code looks like a SQLSTATE is a broken connection', () => {
    // 'EPIPE': a write to a pooled client whose backend was terminated, before
    // the pool noticed; it once made a release give up (issue 22, item 13)
    for (const code of ['EPIPE', 'EBADF', 'ECONNRESET', 'ETIMEDOUT']) {
      assert.equal(lockq._brokenBy(Object.assign(new Error(code), { code, errno: -32, syscall: 'write' })), true, code);
    }
    assert.equal(lockq._brokenBy(new Error('Connection terminated unexpectedly')), true);
  });
  it('a server error is not, unless it ends the session', () => {
    const server = (code) => Object.assign(new Error(code), { code, severity: 'ERROR' });
    assert.equal(lockq._brokenBy(server('55000')), false);
    assert.equal(lockq._brokenBy(server('42501')), false);
    assert.equal(lockq._brokenBy(server('57P01')), true);
    assert.equal(lockq._brokenBy(server('08006')), true);
  });
});

describe('parseNotice', () => {
  it('reads the fields; the lock id may hold spaces', () => {
    assert.deepEqual(lockq.parseNotice('grant 42 5 a b c o:1'), { event: 'grant', token: 42n, lockId: 'a b c', owner: 'o:1' });
  });
  it('counts the lock id in bytes, not characters', () => {
    assert.equal(lockq.parseNotice('lost 1 4 réz o').lockId, 'réz');
    assert.equal(lockq.parseNotice('lost 1 3 réz o'), null);
  });
  it('rejects anything else', () => {
    for (const bad of ['', 'grant', 'grant 1 1 a', 'grant x 1 a o', 'grant 1 0  o', 'granted 1 1 a o', 'grant 1 2 a o']) {
      assert.equal(lockq.parseNotice(bad), null, bad);
    }
  });
});

describe('against a server', { skip: !DSN && 'LOCKQ_TEST_DSN is not set' }, () => {
  let admin;
  let pool;
  const value = async (sql, params) => Object.values((await admin.query(sql, params)).rows[0] ?? { v: null })[0];
  const until = async (sql, params) => {
    const giveUp = Date.now() + PATIENCE;
    while (!(await value(sql, params))) {
      if (Date.now() > giveUp) throw new Error('condition never held: ' + sql);
      await sleep(10);
    }
  };
  const waiters = (lock, n) => until('SELECT count(*) = $2 FROM lockq_waiters WHERE lock_id = $1', [lock, n]);
  const take = async (lock) => assert.notEqual(await value("SELECT lockq_try($1, 'holder', '1 hour')", [lock]), null);
  const give = async (lock) => assert.equal(await value("SELECT lockq_release($1, 'holder')", [lock]), true);
  const holder = (lock) => value('SELECT (SELECT owner FROM lockq_locks WHERE lock_id = $1)', [lock]);
  const client = async (opts = {}) => {
    const c = new pg.Client({ connectionString: DSN, ...opts });
    await c.connect();
    return c;
  };

  before(async () => {
    admin = await client();
    pool = new pg.Pool({ connectionString: DSN, max: 2 }); // small: waiting must not hold a connection
  });
  after(async () => {
    assert.equal(await value('SELECT count(*)::int FROM lockq_waiters'), 0, 'nothing left queued');
    await pool.end();
    await admin.end();
  });

  it('grants in arrival order, waiters on a pool of two and on a client', async () => {
    const lock = 'fifo';
    const c = await client();
    await take(lock);
    const order = [];
    const sources = [pool, pool, c, pool, pool];
    const done = [];
    for (let i = 0; i < sources.length; i++) {
      done.push(lockq.using(sources[i], lock, { timeout: PATIENCE }, async (signal, lease) => {
        await pool.query('SELECT 1'); // the body needs a connection too
        order.push([i, lease.token]);
      }));
      await waiters(lock, i + 1);
    }
    await give(lock);
    await Promise.all(done);
    assert.deepEqual(order.map(([i]) => i), [0, 1, 2, 3, 4]);
    for (const [, t] of order) assert.equal(typeof t, 'bigint');
    assert.deepEqual(order.map(([, t]) => t), order.map(([, t]) => t).sort((a, b) => (a < b ? -1 : 1)));
    await c.end();
  });

  it('times out, and with timeout 0 never waits', async () => {
    const lock = 'timeout';
    await take(lock);
    const t0 = Date.now();
    await assert.rejects(lockq.using(pool, lock, { timeout: 300 }, async () => assert.fail('granted')), lockq.LockTimeoutError);
    assert.ok(Date.now() - t0 >= 300);
    await assert.rejects(lockq.acquire(pool, lock, { timeout: 0 }), lockq.LockTimeoutError);
    await give(lock);
    const lease = await lockq.acquire(pool, lock, { timeout: 0 });
    assert.equal(await value('SELECT lockq_holds($1, $2)', [lock, lease.token.toString()]), true);
    assert.equal(await lease.release(), true);
  });

  it('an AbortSignal cancels the wait and leaves nothing queued', async () => {
    const lock = 'abort';
    await take(lock);
    const ac = new AbortController();
    const p = lockq.acquire(pool, lock, { signal: ac.signal });
    await waiters(lock, 1);
    ac.abort(new Error('stop'));
    await assert.rejects(p, /stop/);
    await waiters(lock, 0);
    await give(lock);
  });

  it('sends the ttl in milliseconds as an interval (not 2000 seconds)', async () => {
    await lockq.using(pool, 'ttl', { ttl: 2000 }, async () => {
      assert.equal(await value("SELECT ttl = interval '2 s' FROM lockq_locks WHERE lock_id = 'ttl'"), true);
    });
  });

  it('renews a short lease while the callback runs', async () => {
    const lock = 'renew';
    await lockq.using(pool, lock, { ttl: 1500 }, async (signal, lease) => {
      await sleep(4000);
      assert.equal(signal.aborted, false);
      assert.equal(lease.held, true);
      assert.equal(await value('SELECT lockq_holds($1, $2)', [lock, lease.token.toString()]), true);
    });
    assert.equal(await holder(lock), null, 'released');
  });

  it('aborts the signal when an administrator takes the lock (pool and client)', async () => {
    const c = await client();
    for (const src of [pool, c]) {
      await assert.rejects(lockq.using(src, 'force', { ttl: 60000 }, async (signal) => {
        await value("SELECT lockq_force_release('force')");
        // the lost notice may be verified before this query's answer arrives
        await new Promise((resolve) => (signal.aborted ? resolve() : signal.addEventListener('abort', resolve)));
        assert.ok(signal.reason instanceof lockq.LockLostError);
      }), lockq.LockLostError);
    }
    await c.end();
  });

  it('aborts the signal when the lease expires and is taken', async () => {
    const lease = await lockq.acquire(pool, 'stolen', { ttl: 500, autoRenew: false });
    await value("SELECT lockq_get('stolen', 'holder', timeout => '10 s')");
    await new Promise((resolve) => (lease.signal.aborted ? resolve() : lease.signal.addEventListener('abort', resolve)));
    assert.equal(lease.held, false);
    assert.equal(await lease.release(), false);
    await give('stolen');
  });

  it('the signal looks at the clock: a blocked event loop cannot hide a lease that ran out', async () => {
    await assert.rejects(lockq.using(pool, 'blocked', { ttl: 500 }, async (signal, lease) => {
      const until = Date.now() + 1000;
      while (Date.now() < until); // blocks the event loop: no timer, no renewal
      assert.equal(lease.held, false);
      assert.throws(() => signal.throwIfAborted(), lockq.LockLostError);
      assert.equal(signal.aborted, true);
    }), lockq.LockLostError);
  });

  it('takes a pool and a client of another copy of pg', async () => {
    const mine = Object.keys(require.cache).filter((k) => /[\\/](pg|pg-pool)[\\/]/.test(k));
    const keep = Object.fromEntries(mine.map((k) => [k, require.cache[k]]));
    for (const k of mine) delete require.cache[k];
    const pg2 = require('pg');
    Object.assign(require.cache, keep);
    assert.notEqual(pg2.Pool, pg.Pool, 'a second copy');
    const p2 = new pg2.Pool({ connectionString: DSN, max: 2 });
    const c2 = new pg2.Client({ connectionString: DSN });
    await c2.connect();
    for (const src of [p2, c2]) {
      await lockq.using(src, 'other-pg', async (signal, lease) => assert.equal(lease.held, true));
    }
    await c2.end();
    await p2.end();
  });

  it('bounds every call when the connection stalls (a stopped backend)', async () => {
    await take('stalled');
    const c = await client();
    await lockq.using(c, 'stalled:warm', async () => {}); // lockq knows the client
    const pid = c.processID;
    process.kill(pid, 'SIGSTOP');
    const t0 = Date.now();
    try {
      await assert.rejects(lockq.acquire(c, 'stalled', { timeout: 2000, owner: 'stalled-owner' }), lockq.LockTimeoutError);
      assert.ok(Date.now() - t0 < 3500, `timeout + 1 s (${Date.now() - t0} ms)`);
    } finally {
      process.kill(pid, 'SIGCONT');
    }
    await until('SELECT count(*) = 0 FROM pg_stat_activity WHERE pid = $1', [pid]);
    await value("SELECT lockq_cancel('stalled', 'stalled-owner')");
    await give('stalled');

    // a pooled client that stalls is discarded, and the wait goes on on a new one
    const p1 = new pg.Pool({ connectionString: DSN, max: 1 });
    await lockq.using(p1, 'stalled:warm', async () => {});
    const c1 = await p1.connect();
    const pid1 = c1.processID;
    c1.release();
    process.kill(pid1, 'SIGSTOP');
    const t1 = Date.now();
    try {
      await lockq.using(p1, 'stalled', { timeout: 10000, owner: 'stalled-pooled' },
        async (signal, lease) => assert.equal(lease.held, true));
      assert.ok(Date.now() - t1 < 10000 / 3 + 2000, `a third of the heartbeat and a reconnect (${Date.now() - t1} ms)`);
    } finally {
      process.kill(pid1, 'SIGCONT');
    }
    // the stopped backend may still run the enqueue it had read: take it back
    await until('SELECT count(*) = 0 FROM pg_stat_activity WHERE pid = $1', [pid1]);
    await value("SELECT lockq_cancel('stalled', 'stalled-pooled')");
    await p1.end();
  });

  it('releases on another pooled client when the one it had is dead (issue 22, item 13)', async () => {
    const p1 = new pg.Pool({ connectionString: DSN, max: 1 });
    p1.on('error', () => {}); // an idle client's death, as an application handles it
    await assert.rejects(lockq.using(p1, 'deadpool', { ttl: 60000 }, async () => {
      const c = await p1.connect();
      const pid = c.processID;
      c.release();
      await value('SELECT pg_terminate_backend($1)', [pid]);
      await until('SELECT count(*) = 0 FROM pg_stat_activity WHERE pid = $1', [pid]);
      throw new Error('the work failed too');
    }), /the work failed too/);
    assert.equal(await holder('deadpool'), null, 'released on another client');
    await p1.end();
  });

  it('forget() leaves the grant to its owner and renews it no more', async () => {
    const result = await lockq.using(pool, 'forgotten', { ttl: 1500, owner: 'forgotten-owner' }, async (signal, lease) => {
      lease.forget();
      assert.equal(lease.held, false);
      assert.equal(lease.remaining, 0);
      return 'done';
    });
    assert.equal(result, 'done', 'using returns, releasing nothing');
    assert.equal(await holder('forgotten'), 'forgotten-owner');
    await until("SELECT NOT EXISTS (SELECT FROM lockq_locks WHERE lock_id = 'forgotten')");
  });

  it('releases when the callback throws', async () => {
    await assert.rejects(lockq.using(pool, 'throws', async () => { throw new Error('boom'); }), /boom/);
    assert.equal(await holder('throws'), null);
  });

  it('keeps a fenced counter exact under concurrency', async () => {
    const lock = 'counter';
    await admin.query('CREATE TABLE counter_node (n int); INSERT INTO counter_node VALUES (0)');
    const p4 = new pg.Pool({ connectionString: DSN, max: 4 });
    let failures = 0;
    const worker = async () => {
      for (let i = 0; i < 25; i++) {
        await lockq.using(p4, lock, { ttl: 10000, timeout: PATIENCE }, async (signal, lease) => {
          const c = await p4.connect();
          try {
            await c.query('BEGIN');
            const { rows } = await c.query('SELECT n FROM counter_node');
            const r = await c.query('UPDATE counter_node SET n = $1 WHERE lockq_holds($2, $3)', [rows[0].n + 1, lock, lease.token.toString()]);
            if (r.rowCount !== 1) failures++;
            await c.query('COMMIT');
          } finally {
            c.release();
          }
        });
      }
    };
    await Promise.all([worker(), worker(), worker(), worker()]);
    await p4.end();
    assert.equal(failures, 0);
    assert.equal(await value('SELECT n FROM counter_node'), 100);
    await admin.query('DROP TABLE counter_node');
  });

  it('needs no search_path', async () => {
    const c = await client({ options: '-c search_path=' });
    await lockq.using(c, 'nopath', async (signal, lease) => {
      assert.equal(await holder('nopath'), lease.owner);
    });
    await c.end();
  });
});
