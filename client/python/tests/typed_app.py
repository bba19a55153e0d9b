# Copyright (c) 2026, lockq developers
# This file is part of lockq, released under the PostgreSQL License
# (see LICENSE).

"""An application typed as strictly as mypy --strict wants, using lockq's
public API.  TAP 401_python type-checks it against the installed package:
an API that lost its annotations, or changed a type, fails the check."""

import asyncio
import threading
from typing import Optional

import psycopg
from psycopg_pool import AsyncConnectionPool, ConnectionPool

import lockq
import lockq.aio


def work(pool: ConnectionPool) -> Optional[int]:
    stop = threading.Event()
    with lockq.lock(pool, "typed:app", ttl=30.0, timeout=5.0, cancel=stop) as lease:
        token: Optional[int] = lease.token
        left: float = lease.remaining
        lease.extend(60.0)
        lease.check()
        held: bool = lease.held
        lost: bool = lease.lost.is_set()
        owner: str = lease.owner
        print(token, left, held, lost, owner)
    released: bool = lockq.lock(pool, "typed:app", timeout=0).acquire().release()
    lockq.lock(pool, "typed:app", ttl=5.0).acquire().forget()
    print(released)
    notice: Optional[lockq.Notice] = lockq.parse_notice("granted 1 1 x o")
    print(notice)
    return token


async def work_async(conn: psycopg.AsyncConnection[object], pool: AsyncConnectionPool) -> int:
    async with lockq.aio.lock(conn, "typed:app", ttl=10.0) as lease:
        await lease.extend(20.0)
        left: float = lease.remaining
        print(left)
        lease.forget()
    async with lockq.aio.lock(pool, "typed:app") as lease2:
        assert lease2.token is not None
        return lease2.token


def main() -> None:
    try:
        work(ConnectionPool("", open=False))
    except lockq.LockError as e:
        print(e)
    asyncio.run(asyncio.sleep(0))
