--
-- lockq_security: a role can act only for owners whose grant or wait it
-- made itself.  Knowing another role's owner name and token is not enough
-- to release, renew, take over or cancel; members of lockq_admin can.  A
-- refused call changes nothing.  lockq_holds answers true or false only.
--
-- Copyright (c) 2026, lockq developers
-- This file is part of lockq, released under the PostgreSQL License
-- (see LICENSE).
--
CREATE ROLE lq_alice;
CREATE ROLE lq_bob;
CREATE ROLE lq_carol IN ROLE lockq_admin;
SELECT rolcanlogin FROM pg_roles WHERE rolname = 'lockq_admin';

-- alice holds sec-1 as owner a1, and owner a2 waits for it (client waiter)
SET ROLE lq_alice;
SELECT lockq_try('sec-1', 'a1', '1 hour') AS tok \gset
SELECT lockq_enqueue('sec-1', 'a2', '1 hour', 'lq_chan_a2', '1 hour') IS NULL AS a2_queued;
RESET ROLE;
SELECT owner, token = :tok AS alice_holds, role FROM lockq_locks WHERE lock_id = 'sec-1';
SELECT expires AS exp0 FROM lockq_locks WHERE lock_id = 'sec-1' \gset

-- bob knows the owner names and the token, and gets nowhere
SET ROLE lq_bob;
SELECT lq_err(format('SELECT lockq_release(%L, %L, %s)', 'sec-1', 'a1', :tok)) AS release;
SELECT lq_err(format('SELECT lockq_release(%L, %L)', 'sec-1', 'a1')) AS release_no_token;
SELECT lq_err(format('SELECT lockq_renew(%L, %L, %s, %L)', 'sec-1', 'a1', :tok, '10 hours')) AS renew;
SELECT lq_err(format('SELECT lockq_try(%L, %L)', 'sec-1', 'a1')) AS take_over_try;
SELECT lq_err(format('SELECT lockq_get(%L, %L, timeout => %L)', 'sec-1', 'a1', '1s')) AS take_over_get;
SELECT lq_err(format('SELECT lockq_enqueue(%L, %L)', 'sec-1', 'a1')) AS take_over_enqueue;
SELECT lq_err(format('SELECT lockq_heartbeat(%L, %L)', 'sec-1', 'a1')) AS heartbeat_holder;
SELECT lq_err(format('SELECT lockq_cancel(%L, %L)', 'sec-1', 'a1')) AS cancel_holder;
-- nor can he touch the queued wait of a2
SELECT lq_err(format('SELECT lockq_heartbeat(%L, %L)', 'sec-1', 'a2')) AS heartbeat_waiter;
SELECT lq_err(format('SELECT lockq_cancel(%L, %L)', 'sec-1', 'a2')) AS cancel_waiter;
SELECT lq_err(format('SELECT lockq_enqueue(%L, %L, channel => %L)', 'sec-1', 'a2', 'lq_bob_chan')) AS enqueue_waiter;
SELECT lq_err(format('SELECT lockq_get(%L, %L, timeout => %L)', 'sec-1', 'a2', '1s')) AS get_waiter;
-- a wrong token is just "not held": nothing to learn from it
SELECT lockq_release('sec-1', 'a1', :tok + 1000) AS wrong_token_release,
	   lockq_renew('sec-1', 'a1', :tok + 1000) AS wrong_token_renew;
-- the administrator's function and the tables are out of reach
SELECT lq_err($$SELECT lockq_force_release('sec-1')$$) AS force_release;
SELECT lq_err($$DELETE FROM lockq.owners$$) AS delete_owners;
SELECT lq_err($$UPDATE lockq.queue SET ts = 0$$) AS update_queue;
SELECT lq_err($$SELECT nextval('lockq.token_seq')$$) AS draw_token;
-- fencing: only true or false
SELECT lockq_holds('sec-1', :tok) AS holds_true, lockq_holds('sec-1', :tok + 1) AS holds_false;
-- bob may take his own locks, with his own owner names
SELECT lockq_try('sec-2', 'b1') IS NOT NULL AS bob_takes_his_own;
SELECT lockq_release('sec-2', 'b1') AS bob_releases_his_own;
RESET ROLE;

-- nothing changed: same holder, token, lease; a2 still waits
SELECT owner, token = :tok AS same_token, expires = :'exp0'::timestamptz AS same_lease
  FROM lockq_locks WHERE lock_id = 'sec-1';
SELECT owner, position, kind, role FROM lockq_waiters WHERE lock_id = 'sec-1';

-- carol, a member of lockq_admin, may act for alice's owners
SET ROLE lq_carol;
SELECT lockq_renew('sec-1', 'a1', :tok, '2 hours') AS admin_renew;
SELECT lockq_release('sec-1', 'a1', :tok) AS admin_release;
RESET ROLE;
-- the lock went to a2, which alice confirms; carol force-releases it
SET ROLE lq_alice;
SELECT lockq_heartbeat('sec-1', 'a2') AS tok2 \gset
SELECT :tok2 > :tok AS a2_granted_next_token;
RESET ROLE;
SET ROLE lq_carol;
SELECT lockq_force_release('sec-1') AS admin_force_release;
RESET ROLE;
SELECT count(*) AS left_held FROM lockq_locks WHERE lock_id = 'sec-1';
SELECT count(*) AS left_waiting FROM lockq_waiters WHERE lock_id = 'sec-1';

-- a session-bound lock belongs to its session, whatever role it is using
SELECT lockq_try('sec-3') IS NOT NULL AS session_lock;
SET ROLE lq_bob;
SELECT lockq_release('sec-3') AS same_session_other_role;
RESET ROLE;

-- membership is looked up for each call: revoking it takes effect at once
SET ROLE lq_alice;
SELECT lockq_try('sec-4', 'a4', '1 hour') IS NOT NULL AS alice_takes;
RESET ROLE;
REVOKE lockq_admin FROM lq_carol;
SET ROLE lq_carol;
SELECT lq_err($$SELECT lockq_release('sec-4', 'a4')$$) AS after_revoke;
RESET ROLE;
GRANT lockq_admin TO lq_carol;
SET ROLE lq_carol;
SELECT lockq_release('sec-4', 'a4') AS after_grant;
RESET ROLE;

-- Overloading: a role that may create a function in any schema on the
-- caller's search_path can catch unqualified calls that its function
-- matches better, or as well from a schema ahead of lockq's: bob plants
-- lockq_release(text, text, bigint) in a schema he owns, after public.
-- lockq's functions live in the schema lockq, where nobody else can
-- create anything: qualified calls (README.md) always reach them.
CREATE SCHEMA lq_bobs AUTHORIZATION lq_bob;
SET ROLE lq_bob;
GRANT USAGE ON SCHEMA lq_bobs TO PUBLIC;
CREATE FUNCTION lq_bobs.lockq_release(lock_id text, owner text, token bigint)
RETURNS boolean LANGUAGE sql AS $$ SELECT true $$;
RESET ROLE;
SET ROLE lq_alice;
SELECT lq_err($$CREATE FUNCTION lockq.lockq_release(lock_id text, owner text, token integer)
	RETURNS boolean LANGUAGE sql AS 'SELECT false'$$) AS alice_cannot_plant;
SELECT lockq_try('sec-5', 'a5', '1 hour') AS tok5 \gset
SET search_path = public, lq_bobs, lockq;
-- unqualified: bob's function answers, and lies
SELECT lockq_release('sec-5', 'a5', :tok5) AS unqualified;
SELECT count(*) AS still_held FROM lockq.lockq_locks WHERE lock_id = 'sec-5';
-- qualified: lockq's own, whatever the search_path
SELECT lockq.lockq_release('sec-5', 'a5', 1) AS qualified_wrong_token;
SELECT lockq.lockq_release('sec-5', 'a5', :tok5) AS qualified_released;
SELECT count(*) AS not_held FROM lockq.lockq_locks WHERE lock_id = 'sec-5';
RESET search_path;
RESET ROLE;
DROP SCHEMA lq_bobs CASCADE;

-- Error messages name the owner whole: the backend makes the message,
-- so an owner of 255 bytes in a two-byte script (a message longer than
-- the lock server's answer could carry) reaches the client whole, and
-- valid in its encoding.
SET ROLE lq_alice;
SELECT lockq_try('sec-6', 'x' || repeat(U&'\00E9', 127), '1 hour') IS NOT NULL AS alice_takes;
RESET ROLE;
SET ROLE lq_bob;
SELECT r ~ '^42501: owner "x' AS denied,
	   strpos(r, 'x' || repeat(U&'\00E9', 127) || '" of lock "sec-6"') > 0 AS whole,
	   convert_to(r, 'LATIN1') IS NOT NULL AS valid
  FROM lq_err(format('SELECT lockq_release(%L, %L)', 'sec-6', 'x' || repeat(U&'\00E9', 127))) r;
RESET ROLE;
SELECT lockq_force_release('sec-6') AS cleaned_up;

DROP ROLE lq_alice;
DROP ROLE lq_bob;
DROP ROLE lq_carol;
