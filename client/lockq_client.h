/*-------------------------------------------------------------------------
 *
 * lockq_client.h
 *		liblockq: take lockq locks from C the way you use a mutex.
 *
 * A lockqc_conn is one libpq connection shared by any number of threads.
 * Each function below says what it does; how the library behaves (waits,
 * renewals, lost leases, reconnects, the bound of every call) is in
 * doc/liblockq.md.
 *
 * Copyright (c) 2026, lockq developers
 * This file is part of lockq, released under the PostgreSQL License
 * (see LICENSE).
 *
 * IDENTIFICATION
 *		client/lockq_client.h
 *
 *-------------------------------------------------------------------------
 */
#ifndef LOCKQ_CLIENT_H
#define LOCKQ_CLIENT_H

#include <signal.h>
#include <stdbool.h>
#include <stdint.h>

#ifdef __cplusplus
#include <atomic>
/** A cancel flag: set it (to non-zero) from any thread or signal handler. */
typedef std::atomic<int> lockqc_cancel_flag;
#else
/** A cancel flag: set it (to non-zero) from any thread or signal handler. */
typedef _Atomic int lockqc_cancel_flag;
#endif

#ifdef __cplusplus
extern "C"
{
#endif

/** An open connection to a lockq server.  Opaque. */
typedef struct lockqc_conn lockqc_conn;

/** One lock taken through a connection.  Opaque. */
typedef struct lockqc_handle lockqc_handle;

/** lockqc_opts.timeout_ms: wait as long as it takes. */
#define LOCKQC_WAIT_FOREVER		((int64_t) -1)
/** lockqc_opts.timeout_ms: do not wait (take it only if free now). */
#define LOCKQC_NO_WAIT			((int64_t) 0)

/** Results.  Negative values are errors. */
typedef enum lockqc_status
{
	LOCKQC_OK = 0,				/**< acquired / released */
	LOCKQC_TIMEOUT = 1,			/**< lockqc_lock: the timeout expired */
	LOCKQC_NOT_AVAILABLE = 2,	/**< lockqc_trylock: someone else has it */
	LOCKQC_LOST = 3,			/**< the lease was lost before the call */
	LOCKQC_CANCELLED = 4,		/**< lockqc_lock: the cancel flag was set */
	LOCKQC_ERROR = -1,			/**< connection or server error */
	LOCKQC_EINVAL = -2			/**< bad argument */
} lockqc_status;

/** Called (from the library's thread) when a held lease is lost. */
typedef void (*lockqc_lost_cb) (lockqc_handle *h, void *arg);

/**
 * Options of a lock.  Always start from lockqc_opts_init(); passing NULL
 * for options means the defaults.
 */
typedef struct lockqc_opts
{
	int64_t		ttl_ms;			/**< lease length, > 0; default 30000 */
	int64_t		timeout_ms;		/**< lockqc_lock wait limit: LOCKQC_NO_WAIT
								 * (0) takes the lock only if it is free now,
								 * as Redisson's and Curator's 0 does;
								 * LOCKQC_WAIT_FOREVER (any negative value,
								 * the default) waits as long as it takes */
	int64_t		heartbeat_ms;	/**< longest gap between wait heartbeats the
								 * server allows before dropping the waiter,
								 * > 0; default 10000 */
	const char *owner;			/**< identity; NULL: unique per handle
								 * ("host:pid:thread:random") */
	bool		auto_renew;		/**< renew at ttl/3 while held; default true */
	lockqc_lost_cb on_lost;		/**< called once when the lease is lost */
	void	   *on_lost_arg;
	/**
	 * Deprecated: a plain flag read by another thread is a data race (use
	 * cancel_flag).  Still honoured: when *cancel becomes non-zero, a
	 * waiting lockqc_lock withdraws and returns LOCKQC_CANCELLED.
	 */
	volatile sig_atomic_t *cancel;
	/**
	 * Cancellation hook: when *cancel_flag becomes non-zero, a waiting
	 * lockqc_lock withdraws from the queue and returns LOCKQC_CANCELLED.
	 * Setting it from another thread or a signal handler is fine; call
	 * lockqc_wakeup() too so that the wait notices at once.
	 */
	lockqc_cancel_flag *cancel_flag;
} lockqc_opts;

/** Fills *opts with the defaults. */
extern void lockqc_opts_init(lockqc_opts *opts);

/**
 * Connects.  conninfo is a libpq connection string or URI (NULL or "" for
 * the PG* environment defaults).  The library adds defaults the conninfo
 * may override: keepalives=1, keepalives_idle=5, keepalives_interval=2,
 * keepalives_count=3, tcp_user_timeout=10000 and
 * fallback_application_name=lockq.  Each host of a multi-host conninfo is
 * tried with its own deadline (connect_timeout, default 10 s).  On failure
 * returns NULL and, if errmsg is not NULL, sets *errmsg to a malloc'ed
 * message (no trailing newline) the caller frees.
 */
extern lockqc_conn *lockqc_connect(const char *conninfo, char **errmsg);

/**
 * Releases every lock still held through c, withdraws its waits, frees
 * their handles and closes the connection.  It waits at most 2 s for the
 * server's answers.  A thread blocked in lockqc_lock or lockqc_trylock on
 * c meanwhile returns LOCKQC_ERROR.  It may be called from the lost-lease
 * callback (the connection is then closed when the callback returns).
 * No handle of c may be used afterwards.
 */
extern void lockqc_disconnect(lockqc_conn *c);

/**
 * The longest the library waits for any one answer from the server
 * (default 10000 ms): a statement unanswered that long (or a third of the
 * shortest ttl or heartbeat interval of c's locks, if less) counts as a
 * stalled connection, which is dropped and re-established; lockqc_trylock
 * and lockqc_unlock return LOCKQC_ERROR after that long.  Returns
 * LOCKQC_OK or LOCKQC_EINVAL (ms <= 0).
 */
extern int	lockqc_set_io_timeout(lockqc_conn *c, int64_t ms);

/**
 * Waits in FIFO order for lock_id and sets *out to a new handle.
 * Returns LOCKQC_OK, LOCKQC_TIMEOUT, LOCKQC_CANCELLED, or an error.  It
 * returns at most 1 s after timeout_ms (and after a cancel), whatever the
 * network does.  On anything but LOCKQC_OK *out is NULL and nothing is
 * left queued or held: the wait is withdrawn before the call returns, or,
 * if the server cannot be reached in time, by the library as soon as it
 * can (after a reconnect), until the wait would have ended by itself.
 */
extern int	lockqc_lock(lockqc_conn *c, const char *lock_id,
						const lockqc_opts *opts, lockqc_handle **out);

/**
 * Takes lock_id only if it is free and nobody waits.  Returns LOCKQC_OK
 * (and *out), LOCKQC_NOT_AVAILABLE, or an error (after the I/O timeout at
 * most).
 */
extern int	lockqc_trylock(lockqc_conn *c, const char *lock_id,
						   const lockqc_opts *opts, lockqc_handle **out);

/**
 * Releases the lock and frees the handle (always, whatever it returns).
 * Returns LOCKQC_OK, LOCKQC_LOST when the lease had already been lost, or
 * LOCKQC_ERROR when the server did not confirm the release within the I/O
 * timeout, or by the later of the lease's local deadline and 1 s after
 * the call if that comes first; the library then goes on trying until the
 * lease ends.
 */
extern int	lockqc_unlock(lockqc_handle *h);

/**
 * Renews the lease now for ttl_ms (from when the request is sent), and
 * makes ttl_ms the lease's ttl for its later renewals.  Waits for the answer
 * up to the I/O timeout and the lease's local deadline.  Returns LOCKQC_OK,
 * LOCKQC_LOST when the lease is not held (or the server no longer has the
 * grant), LOCKQC_ERROR when the server refused or did not answer in time
 * (the lease may still be held then: see lockqc_held), LOCKQC_EINVAL for a
 * ttl_ms not above 0 or a handle with a request in progress.  Since 1.3.
 */
extern int	lockqc_extend(lockqc_handle *h, int64_t ttl_ms);

/**
 * Frees the handle without releasing the lock: the grant stays on the
 * server until its lease ends or another handle (or process) with the same
 * owner releases it.  For a nested acquisition of a grant that an
 * enclosing holder with the same owner releases (the server's re-entrancy
 * is not counted).
 */
extern void lockqc_forget(lockqc_handle *h);

/** The grant's fencing token. */
extern int64_t lockqc_token(const lockqc_handle *h);

/**
 * True while the lock is held: false once the lease is known lost or its
 * local deadline has passed without a confirmed renewal.
 */
extern bool lockqc_held(const lockqc_handle *h);

/**
 * Milliseconds until the lease's local deadline (counted on
 * CLOCK_BOOTTIME, so a system suspend counts too); 0 once it is not held.
 */
extern int64_t lockqc_remaining_ms(const lockqc_handle *h);

/** The owner name the lock is held under. */
extern const char *lockqc_owner(const lockqc_handle *h);

/** The lock id. */
extern const char *lockqc_lock_id(const lockqc_handle *h);

/**
 * The message of the last error in this thread on c (or, if none, the
 * connection's last error), without a trailing newline.  Valid until the
 * next call on c in this thread.
 */
extern const char *lockqc_errmsg(const lockqc_conn *c);

/**
 * The SQLSTATE of that error: the server's (for instance "22023" for a ttl
 * above lockq.max_ttl, "55000" for a wait the server dropped), "08006"
 * when the connection failed or stalled, "" for errors found by the
 * library itself (bad arguments).
 */
extern const char *lockqc_sqlstate(const lockqc_conn *c);

/** Wakes c's waits to re-check their cancel flags.  Async-signal-safe. */
extern void lockqc_wakeup(lockqc_conn *c);

/** A name for a status code. */
extern const char *lockqc_status_str(int status);

/**
 * liblockq's version, which is lockq's ("1.1"): the version of the
 * extension it was released with.  lockqc_connect refuses a server whose
 * installed extension (pg_extension.extversion) is older than the oldest
 * version this library works with, with a message that says so.
 */
extern const char *lockqc_version(void);

/**
 * Parses a duration: a non-negative number with a unit ms, s, m or h
 * ("500ms", "30s", "1.5s", "5m"); a bare number is seconds.  Returns 0
 * and sets *ms, or -1 on a malformed or out-of-range value.
 */
extern int	lockqc_parse_duration(const char *s, int64_t *ms);

#ifdef __cplusplus
}
#endif

#endif							/* LOCKQ_CLIENT_H */
