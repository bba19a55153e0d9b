# Copyright (c) 2026, lockq developers
# This file is part of lockq, released under the PostgreSQL License
# (see LICENSE).

"""What the synchronous and the asyncio client share: the SQL they send,
the NOTIFY payload parser, owner and channel names, the exceptions.

Every statement is parameterised and calls the extension's functions
qualified with their schema (where lockq_get is, as liblockq looks it up), so
nothing depends on the caller's search_path.  Durations are sent as seconds
through make_interval: a bare number sent as an interval would also mean
seconds, but node-pg and others send milliseconds as text, so we never
rely on that reading.
"""

import logging
import os
import secrets
import socket
import threading
from dataclasses import dataclass
from typing import Optional

log = logging.getLogger("lockq")
"""The "lockq" logger: failed renewals, lost leases, failed releases and
withdrawals (WARNING), a listener connection that failed (INFO).  As the
logging documentation asks of a library, it has only a NullHandler: the
application's logging configuration decides where its records go."""
log.addHandler(logging.NullHandler())

MIN_EXTVERSION = "1.1"          # the oldest extension the clients work with
                                # (the same for liblockq, Node and Go)

DEFAULT_TTL = 30.0
DEFAULT_HEARTBEAT = 10.0
DEFAULT_IO_TIMEOUT = 10.0       # the longest one statement may go unanswered
WITHDRAW_TIMEOUT = 1.0          # for a withdrawal, and for the release of a
                                # lease already lost
RETRY_DELAY = 0.2               # between attempts while a wait's server is
                                # unreachable
AWAIT_SLICE = 0.5               # the longest one lockq_await call waits
MAX_NAME = 255                  # bytes, for lock ids and owners

# the schema of lockq's functions: lockq (1.1) or the extension's (1.0);
# and whether it has lockq_await (1.2)
SCHEMA_QUERY = (
    "SELECT n.nspname, e.extversion, EXISTS (SELECT FROM pg_catalog.pg_proc a"
    "   WHERE a.pronamespace OPERATOR(pg_catalog.=) n.oid"
    "     AND a.proname OPERATOR(pg_catalog.=) 'lockq_await')"
    " FROM pg_catalog.pg_extension e"
    " JOIN pg_catalog.pg_depend d"
    "   ON d.refclassid OPERATOR(pg_catalog.=) 'pg_catalog.pg_extension'::pg_catalog.regclass"
    "  AND d.refobjid OPERATOR(pg_catalog.=) e.oid"
    "  AND d.classid OPERATOR(pg_catalog.=) 'pg_catalog.pg_proc'::pg_catalog.regclass"
    "  AND d.deptype OPERATOR(pg_catalog.=) 'e'"
    " JOIN pg_catalog.pg_proc p ON p.oid OPERATOR(pg_catalog.=) d.objid"
    " JOIN pg_catalog.pg_namespace n ON n.oid OPERATOR(pg_catalog.=) p.pronamespace"
    " WHERE e.extname OPERATOR(pg_catalog.=) 'lockq'"
    "   AND p.proname OPERATOR(pg_catalog.=) 'lockq_get'")

_SECS = "pg_catalog.make_interval(secs => {}::pg_catalog.float8)"
_TEMPLATES = {
    "enqueue": "SELECT {schema}.lockq_enqueue({}::pg_catalog.text, {}::pg_catalog.text, "
               + _SECS + ", {}::pg_catalog.text, " + _SECS + ")",
    "heartbeat": "SELECT {schema}.lockq_heartbeat({}::pg_catalog.text, {}::pg_catalog.text)",
    "await": "SELECT {schema}.lockq_await({}::pg_catalog.text, {}::pg_catalog.text, "
             + _SECS + ")",
    "cancel": "SELECT {schema}.lockq_cancel({}::pg_catalog.text, {}::pg_catalog.text)",
    "try": "SELECT {schema}.lockq_try({}::pg_catalog.text, {}::pg_catalog.text, " + _SECS + ")",
    "renew": "SELECT {schema}.lockq_renew({}::pg_catalog.text, {}::pg_catalog.text, "
             "{}::pg_catalog.int8, " + _SECS + ")",
    "release": "SELECT {schema}.lockq_release({}::pg_catalog.text, {}::pg_catalog.text, "
               "{}::pg_catalog.int8)",
    "holds": "SELECT {schema}.lockq_holds({}::pg_catalog.text, {}::pg_catalog.int8)",
    "probe": "SELECT pg_catalog.pg_notify({}::pg_catalog.text, {}::pg_catalog.text)",
}


class LockError(Exception):
    """Base class of lockq's client errors."""


class LockTimeout(LockError):
    """The lock was not granted within the timeout (nothing is left queued)."""


class LockCancelled(LockError):
    """The wait was cancelled (nothing is left queued)."""


class LockLost(LockError):
    """The lease ended before it was released: the critical section it
    protected may have overlapped with the next holder's."""


class LeaseTable:
    """The leases waiting or holding through one source, by (lock id,
    owner), and the channel their notices come on: what both clients' hubs
    keep.  No lock of its own (the threaded client's hub takes one around
    each call)."""

    def __init__(self):
        self.channel = new_channel()
        self._leases = {}
        self.probe = None
        self.notified = False

    def new_probe(self):
        """A pool's listener connection asks whether notices reach it: a
        transaction pooler (pgbouncer) passes none on, as the LISTEN is on
        whichever server connection it ran.  The probe is a notice the pool
        sends on the hub's channel after each LISTEN; until it has come
        back, waits through the pool wait in their backends (lockq_await)
        rather than for a notice."""
        self.notified = False
        self.probe = "probe " + secrets.token_hex(8)
        return self.probe

    def saw_probe(self, payload):
        """True (and notices do reach the listener) if payload is the probe."""
        if self.probe is not None and payload == self.probe:
            self.notified = True
            return True
        return False

    def register(self, lease):
        """Registers a lease about to wait; returns instead the lease that
        already holds lock_id for the same owner in this process, which the
        new one then joins (counted re-entrancy, lease._join)."""
        key = (lease.lock_id, lease.owner)
        other = self._leases.get(key)
        if other is not None and other._join():
            return other
        if other is not None:
            raise RuntimeError("lock %r is already being waited for by owner %r "
                               "in this process" % key)
        self._leases[key] = lease
        return None

    def unregister(self, lease):
        if self._leases.get((lease.lock_id, lease.owner)) is lease:
            del self._leases[(lease.lock_id, lease.owner)]

    def lease_for(self, notice):
        return self._leases.get((notice.lock_id, notice.owner))

    def alone(self, lease):
        """Is lease the only one waiting or holding through this source?"""
        return len(self._leases) == 1 and self._leases.get((lease.lock_id, lease.owner)) is lease

    def leases(self):
        return list(self._leases.values())


class ConnAwaits:
    """For a source that is one connection of the caller's: a wait alone
    on it waits in its backend (lockq_await); among others it would hold
    up their statements, so it waits for notices."""

    def awaiting(self, lease):
        return self.awaits and self.hub.alone(lease)


class PoolAwaits:
    """For a pool: its waits wait for notices on the pool's listener,
    unless the listener has not seen its probe come back (behind a
    transaction pooler, never: LeaseTable.new_probe); then each wait
    borrows a connection for one lockq_await slice at a time."""

    def awaiting(self, lease):
        return self.awaits and not self.hub.notified


def after_release(lease, released, exc_type):
    """What leaving a lease's block does once the release was tried: raise
    LockLost if the lease was lost before it and the block raised nothing
    (the block's own error matters more); else do not swallow anything."""
    if not released and exc_type is None:
        raise LockLost("the lease on %r (token %d) was lost before it was released"
                       % (lease.lock_id, lease.token))
    return False


def break_socket(conn):
    """Shuts down conn's socket (from any thread): a statement waiting on it
    fails at once, and the connection is broken for good (a pool discards
    it).  For a connection that stalled: a stopped backend, a network that
    drops packets without a reset."""
    try:
        sock = socket.socket(fileno=os.dup(conn.fileno()))
    except Exception:           # closed already (psycopg raises its own)
        return
    with sock:
        try:
            sock.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass


def stalled(bound):
    """The error a statement unanswered for bound seconds ends with."""
    import psycopg
    return psycopg.OperationalError("no answer from the server for %g s: the connection "
                                    "is taken as lost" % bound)


def wait_bound(io_timeout, heartbeat, give_up, now):
    """How long a wait's statement may go unanswered: the I/O timeout, a
    third of the heartbeat interval (so that a stalled connection is
    replaced, and the wait kept, before the server drops it), and a timed
    wait's end plus one second."""
    bound = min(io_timeout, heartbeat / 3)
    if give_up is not None:
        bound = min(bound, give_up - now + WITHDRAW_TIMEOUT)
    return max(bound, 0.1)


def not_installed():
    return LockError("the lockq extension is not installed in this database")


def schema_of(row):
    """(schema, has lockq_await) from SCHEMA_QUERY's row; LockError if the
    extension is missing or older than MIN_EXTVERSION."""
    if row is None:
        raise not_installed()
    schema, version, awaits = row
    if not version_at_least(version, MIN_EXTVERSION):
        raise LockError("lockq extension %s is installed; this client needs %s or later: "
                        "run ALTER EXTENSION lockq UPDATE" % (version, MIN_EXTVERSION))
    return schema, awaits


def version_at_least(version, minimum):
    """True if version ("major.minor...") is minimum or later."""
    def parse(v):
        parts = str(v).split(".")
        return int(parts[0]), int(parts[1])
    try:
        return parse(version) >= parse(minimum)
    except (ValueError, IndexError):
        return False


def statements(schema):
    """The statements for an extension installed in schema, with psycopg's
    %s placeholders.  The schema is always quoted (and a % in it doubled,
    as the placeholders need)."""
    ident = '"%s"' % schema.replace('"', '""').replace("%", "%%")
    return {name: t.replace("{schema}", ident).replace("{}", "%s")
            for name, t in _TEMPLATES.items()}


def new_owner():
    """A fresh owner name, unique per lease: host:pid:thread:random."""
    return "%s:%d:%d:%s" % (socket.gethostname(), os.getpid(),
                            threading.get_native_id(), secrets.token_hex(8))


def new_channel():
    """A fresh NOTIFY channel name.  Lower case: a channel is matched
    exactly, and an unquoted LISTEN folds its name to lower case."""
    return "lockq_" + secrets.token_hex(8)


def check_name(what, value):
    if not isinstance(value, str) or not 1 <= len(value.encode()) <= MAX_NAME:
        raise ValueError("%s must be a string of 1 to %d bytes" % (what, MAX_NAME))


def check_duration(what, value, minimum=0.001):
    if value is None or not value >= minimum:
        raise ValueError("%s must be at least %g seconds" % (what, minimum))
    return float(value)


@dataclass(frozen=True)
class Notice:
    """A parsed lockq NOTIFY payload."""
    event: str                  # "grant", "lost" or "dropped"
    token: int                  # 0 for "dropped"
    lock_id: str
    owner: str


def parse_notice(payload: str) -> "Optional[Notice]":
    """Parses '<event> <token> <length of lock id> <lock id> <owner>'.

    The length counts bytes (of the server encoding, which we assume is
    the client's: UTF-8), not characters, and the lock id may contain
    spaces.  Returns a Notice, or None for anything else (a notification
    is only a hint: nothing is believed before the server confirms it)."""
    raw = payload.encode() if isinstance(payload, str) else bytes(payload)
    parts = raw.split(b" ", 3)
    if len(parts) != 4 or parts[0] not in (b"grant", b"lost", b"dropped"):
        return None
    event, token, length, rest = parts
    if not (token.isdigit() and length.isdigit()):
        return None
    n = int(length)
    if not 1 <= n <= MAX_NAME or len(rest) < n + 2 or rest[n:n + 1] != b" ":
        return None
    owner = rest[n + 1:]
    if len(owner) > MAX_NAME:
        return None
    try:
        return Notice(event.decode(), int(token), rest[:n].decode(), owner.decode())
    except UnicodeDecodeError:
        return None
