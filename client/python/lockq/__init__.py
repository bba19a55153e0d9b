# Copyright (c) 2026, lockq developers
# This file is part of lockq, released under the PostgreSQL License
# (see LICENSE).

"""lockq for Python (psycopg 3): fair, leased, fenced locks in PostgreSQL.

    import lockq
    with lockq.lock(pool, "reports:nightly", ttl=30, timeout=60) as lease:
        conn.execute("UPDATE ... WHERE lockq_holds(%s, %s)", ("reports:nightly", lease.token))

lockq.lock (threads) and lockq.aio.lock (asyncio) wait in the server's FIFO
queue without holding a backend (lockq_enqueue, LISTEN, heartbeats), renew
the lease while the block runs, set lease.lost if it is lost, and release
on exit.  See client/python/README.md and doc/clients.md.
"""

from ._protocol import (LockCancelled, LockError, LockLost, LockTimeout, Notice,
                        parse_notice)
from . import aio
from ._sync import Lease, lock

__all__ = ["lock", "aio", "Lease", "LockError", "LockTimeout", "LockCancelled", "LockLost",
           "Notice", "parse_notice"]
