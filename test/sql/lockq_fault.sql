-- test/sql/lockq_fault.sql: the fault-injection functions of the test build
-- (make FAULT_INJECTION=1), created by tests in their own database; they
-- are not part of the extension, and the production build has none.
-- See src/lockq_fault.c.
--
-- Copyright (c) 2026, lockq developers
-- This file is part of lockq, released under the PostgreSQL License
-- (see LICENSE).

CREATE FUNCTION lockq_fault_arm(name text, action text, arg integer DEFAULT 0,
								skip integer DEFAULT 0, times integer DEFAULT 1,
								server integer DEFAULT NULL)
RETURNS void AS 'lockq', 'lockq_fault_arm' LANGUAGE C VOLATILE;

CREATE FUNCTION lockq_fault_disarm(name text DEFAULT NULL)
RETURNS void AS 'lockq', 'lockq_fault_disarm' LANGUAGE C VOLATILE;

CREATE FUNCTION lockq_fault_wakeup(name text)
RETURNS void AS 'lockq', 'lockq_fault_wakeup' LANGUAGE C VOLATILE;

CREATE FUNCTION lockq_faults(OUT name text, OUT action text, OUT arg integer,
							 OUT skip integer, OUT remaining integer,
							 OUT hits bigint, OUT fired bigint,
							 OUT waiting integer, OUT server integer)
RETURNS SETOF record AS 'lockq', 'lockq_faults' LANGUAGE C VOLATILE;
