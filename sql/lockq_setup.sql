--
-- lockq_setup: runs first.  Creates the extension and a helper that shows
-- an error as "SQLSTATE: message" (without LOCATION lines), so that the
-- other tests can assert both.
--
-- Copyright (c) 2026, lockq developers
-- This file is part of lockq, released under the PostgreSQL License
-- (see LICENSE).
--
CREATE EXTENSION lockq;
CREATE FUNCTION lq_err(q text) RETURNS text LANGUAGE plpgsql AS $$
BEGIN
	EXECUTE q;
	RETURN 'ok';
EXCEPTION WHEN OTHERS THEN
	RETURN SQLSTATE || ': ' || SQLERRM;
END $$;
SELECT lq_err('SELECT 1/0');
