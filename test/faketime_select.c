/*-------------------------------------------------------------------------
 *
 * faketime_select.c
 *		Test helper, preloaded before libfaketime by t/110_clock_jumps.pl.
 *
 * libfaketime stops faking the time in a thread while that thread is inside
 * one of the blocking calls it intercepts (select, epoll_wait, ...).  The
 * PostgreSQL 15 postmaster waits in select() and forks background workers
 * from signal handlers that run during that select(), so every worker --
 * the lockq lock server among them -- would inherit "do not fake" for good
 * and see the real clock while client backends see the faked one.  This
 * select() goes straight to the kernel, so the postmaster never enters that
 * state and all server processes see the same faked wall clock.
 *
 * Copyright (c) 2026, lockq developers
 * This file is part of lockq, released under the PostgreSQL License
 * (see LICENSE).
 *
 * IDENTIFICATION
 *		test/faketime_select.c
 *
 *-------------------------------------------------------------------------
 */
#define _GNU_SOURCE
#include <sys/select.h>
#include <sys/syscall.h>
#include <unistd.h>

int			select(int nfds, fd_set *readfds, fd_set *writefds,
				   fd_set *exceptfds, struct timeval *timeout);

int
select(int nfds, fd_set *readfds, fd_set *writefds, fd_set *exceptfds,
	   struct timeval *timeout)
{
	return syscall(SYS_select, nfds, readfds, writefds, exceptfds, timeout);
}
