--
-- lockq_client: the SQL a client-side waiter uses (lockq_enqueue,
-- lockq_heartbeat, lockq_cancel), in one session.  NOTIFY delivery and the
-- heartbeat deadline are tested in TAP (t/005_client_waiters.pl).
--
-- Copyright (c) 2026, lockq developers
-- This file is part of lockq, released under the PostgreSQL License
-- (see LICENSE).
--
-- free lock: granted at once
SELECT lockq_enqueue('q', 'c0', '1 hour', 'chan_c0') AS tok0 \gset
SELECT :tok0 > 0 AS granted_at_once;
SELECT owner FROM lockq_locks WHERE lock_id = 'q';
-- held: queued, in arrival order, idempotent
SELECT lockq_enqueue('q', 'c1', '1 hour', 'chan_c1') IS NULL AS c1_queued;
SELECT lockq_enqueue('q', 'c2', '1 hour', NULL) IS NULL AS c2_queued;
SELECT lockq_enqueue('q', 'c1', '1 hour', 'chan_c1') IS NULL AS c1_again;
SELECT lockq_heartbeat('q', 'c2') IS NULL AS c2_still_waiting;
SELECT lock_id, owner, position, kind FROM lockq_waiters;
-- a blocking get by an owner that waits as a client is refused
SELECT lq_err($$SELECT lockq_get('q', 'c1', '1 minute', '1 second')$$);
-- lockq_try does not barge in front of client waiters either
SELECT lockq_release('q', 'c0', :tok0) AS released;
SELECT lockq_try('q', 'newcomer') IS NULL AS no_barging;
-- the head of the queue got it; heartbeat returns the token (and confirms)
SELECT owner FROM lockq_locks WHERE lock_id = 'q';
SELECT lockq_heartbeat('q', 'c1') AS tok1 \gset
SELECT :tok1 > :tok0 AS c1_granted;
SELECT lockq_enqueue('q', 'c1', '1 hour') = :tok1 AS enqueue_when_holding;
SELECT lockq_holds('q', :tok1) AS holds;
-- cancel a queued waiter
SELECT lockq_cancel('q', 'c2') AS c2_cancelled;
SELECT count(*) AS waiters FROM lockq_waiters;
SELECT lq_err($$SELECT lockq_heartbeat('q', 'c2')$$);
-- cancel after the grant won the race: the grant is released
SELECT lockq_enqueue('q', 'c3', '1 hour') IS NULL AS c3_queued;
SELECT lockq_release('q', 'c1', :tok1);
SELECT owner FROM lockq_locks WHERE lock_id = 'q';
SELECT lockq_cancel('q', 'c3') AS c3_cancelled_grant;
SELECT count(*) AS locks FROM lockq_locks;
SELECT lockq_cancel('q', 'c3') AS nothing_left;
-- a grant handed to a client-side waiter starts with a lease no longer than
-- its heartbeat interval, until it is picked up
SELECT lockq_try('q', 'h') IS NOT NULL;
SELECT lockq_enqueue('q', 'c4', '1 hour', NULL, '2 seconds') IS NULL AS c4_queued;
SELECT lockq_release('q', 'h');
SELECT expires - acquired AS first_lease FROM lockq_locks WHERE lock_id = 'q';
SELECT lockq_heartbeat('q', 'c4') IS NOT NULL AS picked_up;
SELECT expires - acquired > interval '59 minutes' AS full_lease FROM lockq_locks WHERE lock_id = 'q';
SELECT lockq_release('q', 'c4');
SELECT count(*) AS locks FROM lockq_locks;
SELECT enqueues >= 5 AS enqueues_counted FROM lockq_stats;
-- lockq_await: a client-side waiter waits in a backend, keeping its place
-- (its wake-up by the grant: specs/lockq_await.spec, t/006_await.pl)
SELECT lockq_try('aw', 'h') AS tokh \gset
SELECT lockq_enqueue('aw', 'w1', '1 hour', NULL, '5 seconds') IS NULL AS w1_queued;
SELECT lockq_enqueue('aw', 'w2', '1 hour', NULL, '5 seconds') IS NULL AS w2_queued;
SELECT lockq_await('aw', 'w2', '100 ms') IS NULL AS w2_still_queued;
SELECT owner, position, kind FROM lockq_waiters WHERE lock_id = 'aw';
-- the holder gets its token back
SELECT lockq_await('aw', 'h') = :tokh AS holder_token;
-- nobody waiting, or bad input: an error, and nothing changes
SELECT lq_err($$SELECT lockq_await('aw', 'nobody')$$);
SELECT lq_err($$SELECT lockq_await('aw', 'w1', '-1 s')$$);
SELECT lq_err($$SELECT lockq_await('aw', 'w1', '0 s')$$);
SELECT lq_err($$SELECT lockq_await('aw', NULL)$$);
SELECT lq_err($$SELECT lockq_await('aw', 'session:x')$$);
SELECT lq_err($$SELECT lockq_await(NULL, 'w1')$$);
SELECT lq_err($$SELECT lockq_await(repeat('x', 256), 'w1')$$);
SELECT owner, position, kind FROM lockq_waiters WHERE lock_id = 'aw';
SELECT owner FROM lockq_locks WHERE lock_id = 'aw';
-- a grant made while nobody awaited: the next lockq_await returns it at once
-- and starts the full lease, as lockq_heartbeat does
SELECT lockq_release('aw', 'h', :tokh);
SELECT expires - acquired <= interval '5 seconds' AS heartbeat_lease FROM lockq_locks WHERE lock_id = 'aw';
SELECT lockq_await('aw', 'w1') > :tokh AS w1_token;
SELECT expires - acquired > interval '59 minutes' AS full_lease FROM lockq_locks WHERE lock_id = 'aw';
SELECT lockq_cancel('aw', 'w2') AS w2_withdrawn;
SELECT lockq_release('aw', 'w1');
SELECT count(*) AS locks FROM lockq_locks WHERE lock_id = 'aw';
-- lockq_enqueue with a wait: queue, then wait as lockq_await does, in one
-- call (the wake-up: specs/lockq_await.spec)
SELECT lockq_try('ew', 'h') AS tokh \gset
SELECT lockq_enqueue('ew', 'e1', '1 hour', NULL, '5 seconds', '100 ms') IS NULL AS e1_queued;
SELECT lockq_enqueue('ew', 'e2', '1 hour', NULL, '5 seconds', '100 ms') IS NULL AS e2_queued;
SELECT lockq_enqueue('ew', 'e1', '1 hour', NULL, '5 seconds', '100 ms') IS NULL AS e1_again;
SELECT owner, position, kind FROM lockq_waiters WHERE lock_id = 'ew';
SELECT lq_err($$SELECT lockq_enqueue('ew', 'e3', '1 hour', NULL, NULL, '0 s')$$);
SELECT lq_err($$SELECT lockq_enqueue('ew', 'e3', '1 hour', NULL, NULL, '-1 s')$$);
SELECT lq_err($$SELECT lockq_enqueue('ew', 'e3', '1 hour', NULL, NULL, '400 days')$$);
SELECT count(*) AS waiters FROM lockq_waiters WHERE lock_id = 'ew';
SELECT lockq_enqueue('ew-free', 'e4', '1 hour', NULL, NULL, '1 s') > 0 AS granted_at_once;
SELECT lockq_release('ew-free', 'e4');
SELECT lockq_cancel('ew', 'e1') AND lockq_cancel('ew', 'e2') AS withdrawn;
SELECT lockq_release('ew', 'h', :tokh);
SELECT count(*) AS left_behind FROM lockq_waiters WHERE lock_id LIKE 'ew%';
