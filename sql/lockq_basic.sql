--
-- lockq_basic: single-session semantics of every function.
--
-- Copyright (c) 2026, lockq developers
-- This file is part of lockq, released under the PostgreSQL License
-- (see LICENSE).
--

-- The clock: microseconds since the Unix epoch, close to the wall clock on
-- a fresh cluster, and strictly increasing.
SELECT abs(lockq_now() - (extract(epoch FROM clock_timestamp()) * 1000000)::bigint) < 10000000 AS near_wall_clock;
SELECT lockq_now() AS t1 \gset
SELECT lockq_now() AS t2 \gset
SELECT :t2 > :t1 AS clock_increases;
SELECT count(DISTINCT v) = 1000 AS thousand_distinct FROM (SELECT lockq_now() v FROM generate_series(1, 1000)) s;

--
-- lockq_try on a free lock grants it, bound to this session (owner NULL).
--
SELECT lockq_try('a') AS tok_a \gset
SELECT :tok_a > 0 AS got_token;
SELECT lock_id, owner = lockq_session_owner() AS mine, token = :tok_a AS same_token,
       session_pid = pg_backend_pid() AS bound, ttl
  FROM lockq_locks;
-- re-entrant: same token back
SELECT lockq_try('a') = :tok_a AS reentrant_try;
SELECT lockq_get('a') = :tok_a AS reentrant_get;
-- another owner: NULL, no queueing
SELECT lockq_try('a', 'someone-else') IS NULL AS not_available;
SELECT count(*) AS waiters FROM lockq_waiters;
-- the session owner name cannot be used explicitly by anyone
SELECT lq_err(format('SELECT lockq_release(%L, %L)', 'a', lockq_session_owner()));
-- release: wrong owner, wrong token, then right
SELECT lockq_release('a', 'someone-else') AS by_other;
SELECT lockq_release('a', NULL, :tok_a + 1000) AS wrong_token;
SELECT lockq_release('a', NULL, :tok_a) AS released;
SELECT lockq_release('a') AS again;
SELECT count(*) AS locks FROM lockq_locks;

--
-- Explicit owners, tokens, fencing.
--
SELECT lockq_get('b', 'worker-1', '1 hour') AS tok_b \gset
SELECT lockq_holds('b', :tok_b) AS holds;
SELECT lockq_holds('b', :tok_b + 1) AS holds_other_token;
SELECT lockq_holds('b', NULL) AS holds_null_token;
SELECT lockq_holds('b', -1) AS holds_negative;
SELECT lockq_holds('nothing-here', :tok_b) AS holds_unknown_lock;
SELECT owner, session_pid IS NULL AS not_session_bound FROM lockq_locks WHERE lock_id = 'b';
-- tokens strictly increase over grants
SELECT lockq_try('c', 'worker-1') AS tok_c \gset
SELECT :tok_c > :tok_b AS tokens_increase;
SELECT lockq_release('c', 'worker-1', :tok_c);
SELECT lockq_try('c', 'worker-2') AS tok_c2 \gset
SELECT :tok_c2 > :tok_c AS new_grant_new_token;
SELECT lockq_release('c', 'worker-2');

--
-- Leases: renew sets the end to now + ttl; a re-entrant get extends it.
--
SELECT lockq_renew('b', 'worker-1', :tok_b, '10 minutes') AS renewed;
SELECT expires - now() BETWEEN interval '9 minutes' AND interval '10 minutes 5 seconds' AS renewed_to_ttl
  FROM lockq_locks WHERE lock_id = 'b';
SELECT ttl FROM lockq_locks WHERE lock_id = 'b';
-- without ttl: the grant's own ttl (1 hour)
SELECT lockq_renew('b', 'worker-1') AS renewed_default;
SELECT expires - now() > interval '59 minutes' AS renewed_to_own_ttl FROM lockq_locks WHERE lock_id = 'b';
SELECT lockq_renew('b', 'worker-2') AS renew_by_other;
SELECT lockq_renew('b', 'worker-1', :tok_b + 1) AS renew_wrong_token;
-- a re-entrant acquire never shortens the lease
SELECT lockq_get('b', 'worker-1', '1 second') = :tok_b AS reentrant;
SELECT expires - now() > interval '59 minutes' AS not_shortened FROM lockq_locks WHERE lock_id = 'b';
SELECT lockq_release('b', 'worker-1', :tok_b) AS released;
SELECT lockq_holds('b', :tok_b) AS holds_after_release;
SELECT lockq_renew('b', 'worker-1', :tok_b) AS renew_after_release;

--
-- A grant does not depend on the caller's transaction.
--
BEGIN;
SELECT lockq_get('tx', 'worker-1') AS tok_tx \gset
ROLLBACK;
SELECT owner, token = :tok_tx AS same FROM lockq_locks WHERE lock_id = 'tx';
-- and a release is not undone by a rollback either
BEGIN;
SELECT lockq_release('tx', 'worker-1');
ROLLBACK;
SELECT count(*) AS tx_locks FROM lockq_locks WHERE lock_id = 'tx';
-- works inside a function and a DO block too
DO $$ BEGIN PERFORM lockq_get('in-do', 'worker-1', '1 minute', '1 second'); END $$;
SELECT count(*) AS in_do FROM lockq_locks WHERE lock_id = 'in-do' AND owner = 'worker-1';
SELECT lockq_release('in-do', 'worker-1');

--
-- Timeout: 55P03, and nothing left in the queue.
--
SELECT lockq_try('busy', 'holder') IS NOT NULL AS held;
SELECT lq_err($$SELECT lockq_get('busy', 'waiter', '1 minute', '50 ms')$$);
SELECT count(*) AS waiters_after_timeout FROM lockq_waiters;
SELECT timeouts >= 1 AS counted FROM lockq_stats;
-- statement_timeout (a cancel) leaves nothing either
SET statement_timeout = '100ms';
SELECT lockq_get('busy', 'waiter');
RESET statement_timeout;
SELECT count(*) AS waiters_after_cancel FROM lockq_waiters;
-- lockq_try never barges while the lock is held
SELECT lockq_try('busy', 'waiter') IS NULL AS no_barging;
SELECT lockq_release('busy', 'holder');
SELECT lockq_try('busy', 'waiter') IS NOT NULL AS free_now;
SELECT lockq_release('busy', 'waiter');

--
-- Lease expiry hands the lock on.
--
SELECT lockq_try('short', 'w1', '200 ms') AS tok_short \gset
SELECT pg_sleep(0.5);
SELECT lockq_holds('short', :tok_short) AS expired_not_held;
SELECT lockq_renew('short', 'w1', :tok_short) AS cannot_renew_expired;
SELECT lockq_try('short', 'w2') > :tok_short AS taken_by_next;
SELECT lockq_release('short', 'w2');

-- Strings are opaque: quotes, SQL, unicode, spaces.
SELECT lockq_try($$'; DROP TABLE lockq.owners; --$$, $$o'"\$$) IS NOT NULL AS sqlish;
SELECT lockq_try(E'tab\there', 'ünïcødé ✓') IS NOT NULL AS unicode;
SELECT lock_id, owner FROM lockq_locks ORDER BY lock_id;
SELECT lockq_release($$'; DROP TABLE lockq.owners; --$$, $$o'"\$$);
SELECT lockq_release(E'tab\there', 'ünïcødé ✓');

-- Clean state at the end.
SELECT count(*) AS locks FROM lockq_locks;
SELECT count(*) AS waiters FROM lockq_waiters;
SELECT holders, waiters FROM lockq_stats;
