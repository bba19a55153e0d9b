// Copyright (c) 2026, lockq developers
// This file is part of lockq, released under the PostgreSQL License
// (see LICENSE).

'use strict';
/**
 * lockq for Node.js (node-postgres): fair, leased, fenced locks in PostgreSQL.
 *
 *   const lockq = require('lockq');
 *   await lockq.using(pool, 'reports:nightly', { ttl: 30000 }, async (signal, lease) => {
 *     await pool.query('UPDATE ... WHERE lockq_holds($1, $2)', ['reports:nightly', lease.token]);
 *   });
 *
 * The same state machine as liblockq (client/lockq_client.c):
 * - a wait is queued with lockq_enqueue naming our NOTIFY channel and kept
 *   alive with lockq_heartbeat every third of its heartbeat interval; a
 *   notification only wakes us (the grant is what lockq_heartbeat returns),
 *   so no server backend is blocked while we wait.  Timeout or abort:
 *   lockq_cancel leaves the queue and releases a grant that raced with it.
 * - a held lease is renewed with lockq_renew every third of its ttl.  Its
 *   local deadline counts from when the request that set it was sent
 *   (performance.now(), monotonic), so it never ends after the server's.
 *   A failed renewal, the deadline passing, or a "lost" notice that
 *   lockq_holds confirms aborts lease.signal.
 *
 * Durations are milliseconds.  NODE_DEBUG=lockq turns on the debug log.  They are sent as seconds through
 * make_interval: node-pg sends numbers as text, and '2000'::interval is
 * 2000 seconds.  Tokens are BigInts (they are bigint).  Every call names the
 * schema of the extension's functions: nothing depends on search_path.
 *
 * Sources: a pg.Pool (each statement is a pool.query; one listener
 * connection, opened with the pool's options outside its size, LISTENs
 * while any lease of the pool waits or holds) or a pg.Client (every
 * statement runs on it, and it LISTENs on a channel of its own).  A wait
 * alone on a Client, and every wait of a Pool whose listener gets no
 * notices (a transaction pooler: Hub.newProbe), waits in its backend with
 * lockq_await, 0.5 s at a time, which answers the grant at once.
 */

const crypto = require('node:crypto');
const os = require('node:os');
const { threadId } = require('node:worker_threads');
const { performance } = require('node:perf_hooks');
const { debuglog } = require('node:util');
const pg = require('pg');

/**
 * The debug log (NODE_DEBUG=lockq): failed renewals, lost leases with the
 * reason, failed releases and withdrawals, a pool listener that failed.
 */
const debug = debuglog('lockq');

const DEFAULT_TTL = 30000;
const DEFAULT_HEARTBEAT = 10000;
const DEFAULT_IO_TIMEOUT = 10000; // the longest one statement may go unanswered
const WITHDRAW_TIMEOUT = 1000; // a withdrawal, and the release of a lost lease
const RETRY_DELAY = 200; // between attempts while a wait's server is unreachable
const AWAIT_SLICE = 500; // the longest one lockq_await call waits
const MAX_NAME = 255;
const RECONNECT_DELAY = 500;
const PROBE_TIMEOUT = 5000; // the longest a pool listener's probe may take

/** The oldest extension this client works with (as liblockq, Python and Go). */
const MIN_EXTVERSION = '1.1';

// the schema of lockq's functions, the extension's version, and whether it
// has lockq_await (1.2)
const SCHEMA_QUERY =
  "SELECT n.nspname, e.extversion, EXISTS (SELECT FROM pg_catalog.pg_proc a" +
  "   WHERE a.pronamespace OPERATOR(pg_catalog.=) n.oid" +
  "     AND a.proname OPERATOR(pg_catalog.=) 'lockq_await') AS awaits" +
  " FROM pg_catalog.pg_extension e" +
  " JOIN pg_catalog.pg_depend d" +
  "   ON d.refclassid OPERATOR(pg_catalog.=) 'pg_catalog.pg_extension'::pg_catalog.regclass" +
  "  AND d.refobjid OPERATOR(pg_catalog.=) e.oid" +
  "  AND d.classid OPERATOR(pg_catalog.=) 'pg_catalog.pg_proc'::pg_catalog.regclass" +
  "  AND d.deptype OPERATOR(pg_catalog.=) 'e'" +
  " JOIN pg_catalog.pg_proc p ON p.oid OPERATOR(pg_catalog.=) d.objid" +
  " JOIN pg_catalog.pg_namespace n ON n.oid OPERATOR(pg_catalog.=) p.pronamespace" +
  " WHERE e.extname OPERATOR(pg_catalog.=) 'lockq'" +
  "   AND p.proname OPERATOR(pg_catalog.=) 'lockq_get'";

const SECS = (p) => `pg_catalog.make_interval(secs => ${p}::pg_catalog.float8)`;
const TEMPLATES = {
  enqueue: `lockq_enqueue($1::pg_catalog.text, $2::pg_catalog.text, ${SECS('$3')}, $4::pg_catalog.text, ${SECS('$5')})`,
  heartbeat: 'lockq_heartbeat($1::pg_catalog.text, $2::pg_catalog.text)',
  await: `lockq_await($1::pg_catalog.text, $2::pg_catalog.text, ${SECS('$3')})`,
  cancel: 'lockq_cancel($1::pg_catalog.text, $2::pg_catalog.text)',
  try: `lockq_try($1::pg_catalog.text, $2::pg_catalog.text, ${SECS('$3')})`,
  renew: `lockq_renew($1::pg_catalog.text, $2::pg_catalog.text, $3::pg_catalog.int8, ${SECS('$4')})`,
  release: 'lockq_release($1::pg_catalog.text, $2::pg_catalog.text, $3::pg_catalog.int8)',
  holds: 'lockq_holds($1::pg_catalog.text, $2::pg_catalog.int8)',
};

class LockError extends Error {
  constructor(message) { super(message); this.name = this.constructor.name; }
}
/** The lock was not granted within the timeout (nothing is left queued). */
class LockTimeoutError extends LockError {}
/** The lease ended before it was released. */
class LockLostError extends LockError {}

const now = () => performance.now();
const secs = (ms) => String(ms / 1000);
const tokenOf = (v) => (v === null ? null : BigInt(v));

function statements(schema) {
  const ident = '"' + schema.replace(/"/g, '""') + '"';
  const out = {};
  for (const [name, call] of Object.entries(TEMPLATES)) out[name] = `SELECT ${ident}.${call} AS v`;
  out.probe = 'SELECT pg_catalog.pg_notify($1::pg_catalog.text, $2::pg_catalog.text) AS v';
  return out;
}

function newOwner() {
  return `${os.hostname()}:${process.pid}:${threadId}:${crypto.randomBytes(8).toString('hex')}`;
}

/** Lower case: channels match exactly and an unquoted LISTEN folds to lower case. */
function newChannel() {
  return 'lockq_' + crypto.randomBytes(8).toString('hex');
}

function checkName(what, value) {
  if (typeof value !== 'string' || Buffer.byteLength(value) < 1 || Buffer.byteLength(value) > MAX_NAME) {
    throw new TypeError(`${what} must be a string of 1 to ${MAX_NAME} bytes`);
  }
}

function checkDuration(what, value, min) {
  if (typeof value !== 'number' || !(value >= min)) throw new RangeError(`${what} must be a number of at least ${min} ms`);
  return value;
}

/**
 * Parses a lockq NOTIFY payload, '<event> <token> <length> <lock id> <owner>',
 * where the length counts bytes of the lock id (which may hold spaces).
 * Returns {event, token (BigInt), lockId, owner} or null.
 */
function parseNotice(payload) {
  const buf = Buffer.from(payload, 'utf8');
  const m = /^(grant|lost|dropped) (\d+) (\d+) /.exec(buf.toString('latin1'));
  if (!m) return null;
  const len = Number(m[3]);
  const start = m[0].length;
  if (len < 1 || len > MAX_NAME || buf.length < start + len + 2 || buf[start + len] !== 0x20) return null;
  const owner = buf.subarray(start + len + 1);
  if (owner.length > MAX_NAME) return null;
  return { event: m[1], token: BigInt(m[2]), lockId: buf.subarray(start, start + len).toString('utf8'), owner: owner.toString('utf8') };
}

/** The leases waiting or holding through one source, by lock id and owner. */
class Hub {
  constructor() {
    this.channel = newChannel();
    this.leases = new Map();
    this.probe = null;
    this.notified = false;
  }
  /**
   * A pool's listener asks whether notices reach it: a transaction pooler
   * (pgbouncer) passes none on, as the LISTEN is on whichever server
   * connection it ran.  The probe is a notice sent through the pool after
   * each LISTEN; until it has come back, the pool's waits wait in their
   * backends (lockq_await) rather than for a notice.
   */
  newProbe() {
    this.notified = false;
    this.probe = 'probe ' + crypto.randomBytes(8).toString('hex');
    return this.probe;
  }
  key(lockId, owner) { return JSON.stringify([lockId, owner]); }
  register(lease) { this.leases.set(this.key(lease.lockId, lease.owner), lease); }
  unregister(lease) { this.leases.delete(this.key(lease.lockId, lease.owner)); }
  dispatch(msg) {
    if (msg.channel === this.channel && this.probe !== null && msg.payload === this.probe) {
      this.notified = true;
      return;
    }
    const notice = msg.channel === this.channel ? parseNotice(msg.payload || '') : null;
    const lease = notice && this.leases.get(this.key(notice.lockId, notice.owner));
    if (lease) lease._notice(notice);
  }
  wakeAll() { for (const lease of this.leases.values()) lease._wake(); }
  /** Is lease the only one waiting or holding through this source? */
  alone(lease) { return this.leases.size === 1 && this.leases.get(this.key(lease.lockId, lease.owner)) === lease; }
}

const listen = (client, channel) => client.query(`LISTEN "${channel}"`);

/** A pg.Client of the caller's: every statement runs on it. */
class ClientSource {
  static async create(client) {
    const src = new ClientSource();
    src.client = client;
    src.hub = new Hub();
    [src.stmts, src.awaits] = await lookup(client);
    client.on('notification', (msg) => src.hub.dispatch(msg));
    await listen(client, src.hub.channel);
    return src;
  }
  run(name, params, ms) { return bounded(this.client, this.stmts[name], params, ms); }
  /** A wait alone on the client waits in its backend; among others it would hold up their statements. */
  awaiting(lease) { return this.awaits && this.hub.alone(lease); }
  async open() {}
  close() {}
}

/** The error of a statement unanswered for ms. */
function stalled(ms, cause) {
  const e = new Error(`no answer from the server for ${ms} ms: the connection is taken as lost`);
  e.code = '08006';
  e.cause = cause;
  return e;
}

/**
 * A connection error, not a statement's: no SQLSTATE of the server's, or one
 * of class 08 (connection exception) or 57P (the server ends the session:
 * a terminated backend, a shutdown).  A server's error has a severity; a
 * system error's code can look like a SQLSTATE too ('EPIPE', 'EBADF'), and
 * it is a broken connection.
 */
const brokenBy = (e) => !(e && typeof e.severity === 'string' && typeof e.code === 'string' &&
  /^[0-9A-Z]{5}$/.test(e.code) && !e.code.startsWith('08') && !e.code.startsWith('57P'));

/**
 * Runs text on client and returns column v of its row.  Unanswered within
 * ms, the connection is taken as stalled: its socket is destroyed, so the
 * query fails at once and the client is broken for good.
 */
function bounded(client, text, params, ms) {
  let isStalled = false;
  const timer = setTimeout(() => {
    isStalled = true;
    client.once('error', () => {}); // the client's own report of it
    client.connection?.stream?.destroy();
  }, ms);
  return client.query(text, params).then(
    (r) => { clearTimeout(timer); return r.rows[0].v; },
    (e) => { clearTimeout(timer); throw isStalled ? stalled(ms, e) : e; });
}

/**
 * bounded() on a client of pool, taken for this statement only; one that
 * broke is discarded (release(true)).  Waiting for a free client counts
 * against ms.
 */
async function pooledRun(pool, text, params, ms) {
  const end = now() + ms;
  const got = pool.connect();
  let timer;
  const client = await Promise.race([
    got,
    new Promise((resolve, reject) => { timer = setTimeout(() => reject(stalled(ms)), ms); }),
  ]).catch((e) => {
    got.then((c) => c.release(), () => {});
    throw e;
  }).finally(() => clearTimeout(timer));
  let broken = false;
  // a checked-out client has no listener of the pool's: its death (EPIPE,
  // a terminated backend) must not be an uncaught 'error' event
  const onError = () => { broken = true; };
  client.on('error', onError);
  try {
    return await bounded(client, text, params, Math.max(1, Math.round(end - now())));
  } catch (e) {
    broken = broken || brokenBy(e);
    throw e;
  } finally {
    client.removeListener('error', onError);
    client.release(broken || undefined);
  }
}

/** A pg.Pool: a pooled client per statement, and a listener client of our own. */
class PoolSource {
  static async create(pool) {
    const src = new PoolSource();
    src.pool = pool;
    src.pooled = true; // a failed statement may succeed on another client
    src.hub = new Hub();
    [src.stmts, src.awaits] = await lookup(pool);
    src.users = 0;
    src.listener = null;
    return src;
  }
  run(name, params, ms) { return pooledRun(this.pool, this.stmts[name], params, ms); }
  /**
   * A wait waits for notices on the listener, unless its probe has not come
   * back (behind a transaction pooler, never): then it borrows a pooled
   * client for one lockq_await slice at a time.
   */
  awaiting() { return this.awaits && !this.hub.notified; }

  /** A lease starts: the listener must be up before it queues. */
  async open() {
    this.users++;
    try {
      if (!this.listener) this.listener = this.connect();
      await this.listener;
    } catch (e) {
      this.close();
      throw e;
    }
  }

  /** A lease ends; the last one closes the listener (which would keep Node running). */
  close() {
    if (--this.users > 0 || !this.listener) return;
    const l = this.listener;
    this.listener = null;
    l.then((c) => c.end(), () => {});
  }

  async connect() {
    // the application's pg: a Pool carries its Client class
    const Client = typeof this.pool.Client === 'function' ? this.pool.Client : pg.Client;
    const client = new Client(this.pool.options);
    client.on('notification', (msg) => this.hub.dispatch(msg));
    client.on('error', (e) => {
      debug('the pool\'s listener connection failed (%s): reconnecting', e.message);
      this.reconnect(client);
    });
    try {
      await client.connect();
      await listen(client, this.hub.channel);
    } catch (e) {
      client.end().catch(() => {});
      throw e;
    }
    // a failed probe leaves the waits in lockq_await
    this.run('probe', [this.hub.channel, this.hub.newProbe()], PROBE_TIMEOUT).catch(() => {});
    return client;
  }

  /** The listener broke: a new one, and every waiter asks the server now. */
  reconnect(broken) {
    broken.end().catch(() => {});
    const retry = () => {
      if (this.users === 0) return;
      this.listener = this.connect();
      this.listener.then(() => this.hub.wakeAll(), () => setTimeout(retry, RECONNECT_DELAY));
    };
    setTimeout(retry, RECONNECT_DELAY);
  }
}

/** The statements, and whether the extension has lockq_await (1.2). */
async function lookup(queryable) {
  const { rows } = await queryable.query(SCHEMA_QUERY);
  if (rows.length !== 1) throw new LockError('the lockq extension is not installed in this database');
  if (!versionAtLeast(rows[0].extversion, MIN_EXTVERSION)) {
    throw new LockError(`lockq extension ${rows[0].extversion} is installed; this client needs ${MIN_EXTVERSION} or later: run ALTER EXTENSION lockq UPDATE`);
  }
  return [statements(rows[0].nspname), rows[0].awaits];
}

/** True if version ("major.minor...") is min or later. */
function versionAtLeast(version, min) {
  const parse = (v) => {
    const m = /^(\d+)\.(\d+)/.exec(String(v));
    return m ? [Number(m[1]), Number(m[2])] : null;
  };
  const a = parse(version);
  const b = parse(min);
  return a !== null && (a[0] > b[0] || (a[0] === b[0] && a[1] >= b[1]));
}

const sources = new WeakMap();

// A pool or client of the application's own copy of pg is not an instance
// of ours: recognise them by shape as well.
const isPool = (o) => o instanceof pg.Pool ||
  (o != null && typeof o.connect === 'function' && typeof o.query === 'function' &&
   'totalCount' in o && 'idleCount' in o);
const isClient = (o) => o instanceof pg.Client ||
  (o != null && typeof o.connect === 'function' && typeof o.query === 'function' &&
   'connectionParameters' in o);

/** The (cached) source of a pg.Pool or pg.Client. */
function sourceOf(obj) {
  let src = sources.get(obj);
  if (!src) {
    if (isPool(obj)) src = PoolSource.create(obj);
    else if (isClient(obj)) src = ClientSource.create(obj);
    else throw new TypeError('lockq needs a pg.Pool or a pg.Client');
    sources.set(obj, src);
    src.catch(() => sources.delete(obj));
  }
  return src;
}

const abortedOf = Object.getOwnPropertyDescriptor(AbortSignal.prototype, 'aborted').get;
const rawAborted = (signal) => abortedOf.call(signal);

/**
 * lease.signal consults the clock: a timer cannot fire while the event loop
 * is blocked, so reading signal.aborted (or signal.reason, or calling
 * signal.throwIfAborted()) past the local deadline aborts it then and there.
 */
function clockedSignal(lease, signal) {
  const check = () => {
    if (lease.token !== null && !lease._done && !rawAborted(signal) && now() >= lease._deadline) {
      lease._lose('no renewal confirmed before its local deadline');
    }
  };
  const reasonOf = Object.getOwnPropertyDescriptor(AbortSignal.prototype, 'reason').get;
  const throwIfAborted = signal.throwIfAborted;
  Object.defineProperty(signal, 'aborted', { get() { check(); return abortedOf.call(this); } });
  Object.defineProperty(signal, 'reason', { get() { check(); return reasonOf.call(this); } });
  signal.throwIfAborted = function () { check(); return throwIfAborted.call(this); };
  return signal;
}

/**
 * A held (or lost) lease.  token: BigInt fencing token; signal: an
 * AbortSignal aborted (reason LockLostError) when the lease is lost (its
 * aborted, reason and throwIfAborted look at the clock too, so a blocked
 * event loop cannot hide a lease that ran out); held: the lease is valid
 * (not lost, local deadline ahead).
 */
class Lease {
  constructor(src, lockId, opts) {
    checkName('lock id', lockId);
    this.lockId = lockId;
    this.owner = opts.owner ?? newOwner();
    checkName('owner', this.owner);
    this.token = null;
    this._src = src;
    this._ttl = checkDuration('ttl', opts.ttl ?? DEFAULT_TTL, 1);
    this._heartbeat = checkDuration('heartbeat', opts.heartbeat ?? DEFAULT_HEARTBEAT, 100);
    this._timeout = opts.timeout == null ? null : checkDuration('timeout', opts.timeout, 0);
    this._autoRenew = opts.autoRenew ?? true;
    this._ioTimeout = checkDuration('ioTimeout', opts.ioTimeout ?? DEFAULT_IO_TIMEOUT, 100);
    this._ac = new AbortController();
    this.signal = clockedSignal(this, this._ac.signal);
    this._deadline = 0;
    this._done = false;
    this._forgotten = false;
    this._woken = false;
    this._resume = null;
    this._timers = { deadline: null, renew: null };
  }

  get held() {
    return this.token !== null && !this._done && !rawAborted(this.signal) && now() < this._deadline;
  }

  /** Milliseconds until the local deadline; 0 once the lease is not held. */
  get remaining() {
    return this.held ? Math.max(0, this._deadline - now()) : 0;
  }

  /**
   * Renews the lease now for ttl milliseconds (default: its ttl) from when
   * the request is sent, and makes ttl its ttl for later renewals.  Throws
   * LockLostError if the lease is not held or the server refuses; another
   * error if the server did not answer in time (the lease may still be
   * held then).
   */
  async extend(ttl) {
    ttl = ttl === undefined ? this._ttl : checkDuration('ttl', ttl, 1);
    if (!this.held) throw new LockLostError(`the lease on "${this.lockId}" is not held`);
    if (!(await this._renewFor(ttl))) {
      throw new LockLostError(`the lease on "${this.lockId}" (token ${this.token}) was lost`);
    }
    this._ttl = ttl;
  }

  /**
   * Stops renewing and watching the lease without releasing it: the grant
   * stays on the server until its lease ends or its owner releases it
   * (lockq_release with owner and token), say in another process that takes
   * the work over.  using() then releases nothing and throws nothing.
   */
  forget() {
    if (this._done) return;
    this._done = true;
    this._forgotten = true;
    clearTimeout(this._timers.deadline);
    clearTimeout(this._timers.renew);
    this._src.hub.unregister(this);
    this._src.close();
  }

  /** Releases the lock; true if the lease was still held until then. */
  async release() {
    if (this._done) return false;
    const held = this.held;
    this._done = true;
    clearTimeout(this._timers.deadline);
    clearTimeout(this._timers.renew);
    this._src.hub.unregister(this);
    this._src.close();
    try {
      return (await this._runRetrying(held ? this._ioTimeout : WITHDRAW_TIMEOUT, 'release', this.token.toString())) && held;
    } catch (e) {
      debug('releasing "%s" (token %s) failed (%s): the lease ends by itself', this.lockId, String(this.token), e.message);
      throw e;
    }
  }

  _run(name, ...params) {
    return this._runWithin(this._ioTimeout, name, ...params);
  }

  /**
   * _runWithin for the statements that end something (release, withdrawal):
   * through a pool, a client that fails (dead after a switchover or a
   * terminated backend, not yet dropped by the pool) is followed by
   * another, until ms; the statements are idempotent for their owner.
   */
  async _runRetrying(ms, name, ...params) {
    const end = now() + ms;
    for (;;) {
      try {
        return await this._runWithin(Math.max(100, Math.round(end - now())), name, ...params);
      } catch (e) {
        if (!this._src.pooled || !brokenBy(e) || end - now() <= RETRY_DELAY) throw e;
        await new Promise((resolve) => setTimeout(resolve, RETRY_DELAY));
      }
    }
  }

  _runWithin(ms, name, ...params) {
    return this._src.run(name, [this.lockId, this.owner, ...params], ms);
  }

  // --- waiting -----------------------------------------------------------

  async _acquire(cancel) {
    await this._src.open();
    this._src.hub.register(this);
    try {
      const [token, sent] = this._timeout === 0 ? await this._try() : await this._wait(cancel);
      this.token = token;
      this._setDeadline(sent + this._ttl);
      if (this._autoRenew) this._scheduleRenew(sent + this._ttl / 3);
    } catch (e) {
      this._src.hub.unregister(this);
      this._src.close();
      throw e;
    }
  }

  async _try() {
    const sent = now();
    const token = tokenOf(await this._run('try', secs(this._ttl)));
    if (token === null) throw new LockTimeoutError(`lock "${this.lockId}" is not available`);
    return [token, sent];
  }

  async _enqueue(ms) {
    return tokenOf(await this._runWithin(ms, 'enqueue', secs(this._ttl), this._src.hub.channel, secs(this._heartbeat)));
  }

  /**
   * One lockq_await of at most AWAIT_SLICE (and the rest of the timeout):
   * the backend wakes at the grant and answers with the token, with no
   * NOTIFY, which a transaction pooler would not pass on; null when the
   * slice ends (it counts as a heartbeat).  Used when the source says so
   * (its awaiting()).
   */
  async _await(giveUp, ms) {
    this._woken = false;
    const span = Math.max(1, Math.min(AWAIT_SLICE, giveUp - now()));
    try {
      return tokenOf(await this._runWithin(ms + span, 'await', secs(span)));
    } catch (e) {
      if (e.code === '55000') return this._enqueue(ms);
      throw e;
    }
  }

  /** One heartbeat: the token once granted; a dropped wait (55000) queues again. */
  async _poll(ms) {
    this._woken = false;
    try {
      return tokenOf(await this._runWithin(ms, 'heartbeat'));
    } catch (e) {
      if (e.code === '55000') return this._enqueue(ms);
      throw e;
    }
  }

  /**
   * Queues and waits.  A wait's statement may go unanswered for a third of
   * the heartbeat interval (and at most the timeout plus 1 s); one that
   * fails on its connection (broken, or stalled and broken) is tried again,
   * on a new pooled client if there is one, keeping the place, until the
   * server has been unreachable for the heartbeat interval.
   */
  async _wait(cancel) {
    const giveUp = this._timeout === null ? Infinity : now() + this._timeout;
    let queued = false;
    let sent = now();
    let reached = sent;
    try {
      for (;;) {
        cancel?.throwIfAborted();
        if (now() >= giveUp) throw new LockTimeoutError(`lock "${this.lockId}" was not granted within ${this._timeout} ms`);
        const due = sent + this._heartbeat / 3;
        const awaiting = queued && this._src.awaiting(this);
        if (!queued || awaiting || this._woken || now() >= due) {
          sent = now();
          const ms = Math.max(100, Math.round(Math.min(this._ioTimeout, this._heartbeat / 3, giveUp - sent + WITHDRAW_TIMEOUT)));
          let token;
          try {
            if (awaiting) token = await this._await(giveUp, ms);
            else token = await (queued ? this._poll(ms) : this._enqueue(ms));
          } catch (e) {
            if (!brokenBy(e) || now() - reached > this._heartbeat) throw e;
            await this._pause(RETRY_DELAY, cancel);
            continue;
          }
          queued = true;
          reached = sent;
          if (token !== null) return [token, sent];
        } else {
          await this._pause(Math.min(due, giveUp) - now(), cancel);
        }
      }
    } catch (e) {
      await this._runRetrying(WITHDRAW_TIMEOUT, 'cancel').catch((w) => {
        debug('withdrawing the wait for "%s" failed (%s): the server drops it within %d ms', this.lockId, w.message, this._heartbeat);
      });
      throw e;
    }
  }

  /** Waits up to ms for a notice or the cancel signal (not at all if it has fired). */
  _pause(ms, cancel) {
    return new Promise((resolve) => {
      const done = () => {
        clearTimeout(timer);
        cancel?.removeEventListener('abort', done);
        this._resume = null;
        resolve();
      };
      // an 'abort' listener added after the abort is never called
      const timer = setTimeout(done, cancel?.aborted ? 0 : Math.max(0, ms));
      cancel?.addEventListener('abort', done);
      this._resume = done;
    });
  }

  _wake() {
    this._woken = true;
    if (this._resume) this._resume();
  }

  // --- holding -----------------------------------------------------------

  _notice(notice) {
    if (notice.event === 'lost' && this.token !== null) this._verify();
    else this._wake();
  }

  /** A "lost" notice is only a hint: ask the server. */
  async _verify() {
    try {
      if (!(await this._src.run('holds', [this.lockId, this.token.toString()], this._ioTimeout))) {
        this._lose('a lost notice, confirmed by lockq_holds');
      }
    } catch {
      // unreachable server: the local deadline decides
    }
  }

  _setDeadline(deadline) {
    clearTimeout(this._timers.deadline);
    this._deadline = deadline;
    this._timers.deadline = setTimeout(() => this._expire(), Math.max(0, deadline - now()));
  }

  _expire() {
    if (!this._done && now() >= this._deadline) this._lose('no renewal confirmed before its local deadline');
  }

  _lose(why) {
    if (this._done || rawAborted(this.signal)) return;
    debug('the lease on "%s" (token %s) was lost: %s', this.lockId, String(this.token), why);
    clearTimeout(this._timers.deadline);
    clearTimeout(this._timers.renew);
    this._ac.abort(new LockLostError(`the lease on "${this.lockId}" (token ${this.token}) was lost`));
  }

  _scheduleRenew(at) {
    this._timers.renew = setTimeout(() => this._renew(), Math.max(0, at - now()));
  }

  /** Renews once and schedules the next; a failed attempt is tried again soon. */
  async _renew() {
    const sent = now();
    try {
      if (await this._renewFor(this._ttl)) this._scheduleRenew(sent + this._ttl / 3);
    } catch (e) {
      if (!this._done && !this.signal.aborted) {
        debug('renewing the lease on "%s" (token %s) failed (%s): trying again', this.lockId, String(this.token), e.message);
        this._scheduleRenew(now() + Math.min(this._ttl / 10, 1000));
      }
    }
  }

  /**
   * One lockq_renew for ttl (for _renew and extend()): true if the local
   * deadline moved to ttl from when it was sent; false if the lease was
   * released meanwhile, the server refused (the lease is lost), or it came
   * after the lease was given up (then the grant is released).  Throws the
   * statement's error.
   */
  async _renewFor(ttl) {
    const sent = now();
    const renewed = await this._runWithin(Math.max(100, Math.min(this._ioTimeout, Math.round(this._deadline - sent))),
      'renew', this.token.toString(), secs(ttl));
    if (this._done) return false;
    if (!renewed) {
      this._lose('the server refused its renewal');
      return false;
    }
    if (this.signal.aborted || now() >= this._deadline) {
      await this._run('release', this.token.toString()).catch(() => {}); // renewed after we gave it up
      return false;
    }
    this._setDeadline(sent + ttl);
    return true;
  }
}

/**
 * Waits for lockId and returns a held Lease; release it with
 * lease.release().  Options (milliseconds): ttl (default 30000, renewed
 * every ttl/3 unless autoRenew is false), timeout (undefined: forever; 0:
 * never wait, lockq_try), heartbeat (the wait's liveness bound on the
 * server, default 10000), owner (default unique per lease), signal (an
 * AbortSignal that cancels the wait), ioTimeout (default 10000: the longest
 * one statement may go unanswered before its connection is taken as
 * stalled and broken; a wait's statements at most a third of the heartbeat
 * interval and the timeout plus 1000).  Throws LockTimeoutError, or the
 * signal's reason.
 */
async function acquire(source, lockId, opts = {}) {
  const lease = new Lease(await sourceOf(source), lockId, opts);
  await lease._acquire(opts.signal);
  return lease;
}

/**
 * Runs fn(signal, lease) holding lockId, renewing the lease meanwhile, and
 * releases it when fn settles (also when it throws).  signal aborts if the
 * lease is lost; then, if fn returned normally, using throws
 * LockLostError.  Returns what fn returned.
 */
async function using(source, lockId, opts, fn) {
  if (typeof opts === 'function') [opts, fn] = [{}, opts];
  const lease = await acquire(source, lockId, opts);
  let result;
  try {
    result = await fn(lease.signal, lease);
  } catch (e) {
    if (!lease._forgotten) await lease.release().catch(() => {});
    throw e;
  }
  if (lease._forgotten) return result;
  if (!(await lease.release())) throw new LockLostError(`the lease on "${lockId}" (token ${lease.token}) was lost before it was released`);
  return result;
}

module.exports = { using, acquire, Lease, LockError, LockTimeoutError, LockLostError, parseNotice, MIN_EXTVERSION };
// for the tests only
module.exports._brokenBy = brokenBy;
