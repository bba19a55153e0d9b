// Copyright (c) 2026, lockq developers
// This file is part of lockq, released under the PostgreSQL License
// (see LICENSE).

'use strict';
// A lock client driven line by line, for the fault matrix of
// test/t/309_client_matrix.pl (the same commands as
// client/python/tools/agent.py; "cancel" aborts an AbortSignal, "block"
// blocks the event loop).  argv: DSN [pool]; with "pool", the agent's
// locks go through a pg.Pool of DSN, not one pg.Client.
const readline = require('node:readline');
const pg = require('pg');
const lockq = require('../lockq.js');

const say = (...w) => process.stdout.write(w.join(' ') + '\n');
const wallNs = () => BigInt(Math.round((performance.timeOrigin + performance.now()) * 1e6));

async function main() {
  const pooled = process.argv[3] === 'pool';
  const client = pooled ? new pg.Pool({ connectionString: process.argv[2], max: 4 })
    : new pg.Client({ connectionString: process.argv[2] });
  client.on('error', () => {});
  if (!pooled) await client.connect();
  let lease = null;
  const rl = readline.createInterface({ input: process.stdin });
  for await (const line of rl) {
    const cmd = line.split(' ');
    const t0 = performance.now();
    const ms = () => Math.round(performance.now() - t0);
    if (cmd[0] === 'acquire') {
      const timeout = Number(cmd[3]) < 0 ? undefined : Number(cmd[3]);
      try {
        lease = await lockq.acquire(client, cmd[1], { ttl: Number(cmd[2]), timeout, heartbeat: Number(cmd[4]) });
      } catch (e) {
        say('failed', e.name, ms());
        continue;
      }
      say('acquired', lease.token, process.pid);
      // the protected work: read the clock, then check the lease
      const l = lease;
      let last = 0n;
      const tick = () => {
        const t = wallNs();
        if (!l.held) return say('stopped', last);
        last = t;
        setTimeout(tick, 1);
      };
      tick();
    } else if (cmd[0] === 'release') {
      try {
        say('released', (await lease.release()) ? 1 : 0, ms());
      } catch (e) {
        say('failed', e.name, ms());
      }
    } else if (cmd[0] === 'cancel') {
      const ac = new AbortController();
      const timer = setTimeout(() => ac.abort(), Number(cmd[3]));
      let outcome = 'acquired';
      try {
        await lockq.using(client, cmd[1], { ttl: Number(cmd[2]), heartbeat: Number(cmd[4]), signal: ac.signal },
          async () => {});
      } catch (e) {
        outcome = ac.signal.aborted && e === ac.signal.reason ? 'cancelled' : e.name;
      }
      clearTimeout(timer);
      say('cancel_done', outcome, ms());
    } else if (cmd[0] === 'block') {
      const end = performance.now() + Number(cmd[1]);
      while (performance.now() < end);
      say('blocked');
    } else if (cmd[0] === 'ping') {
      try {
        await lockq.using(client, `agent-ping-${process.pid}`, { timeout: 0 }, async () => {});
        say('pong', 'ok');
      } catch (e) {
        say('pong', e.name);
      }
    } else if (cmd[0] === 'quit') {
      break;
    }
  }
  process.exit(0);
}

main().catch((e) => { console.error(e); process.exit(1); });
