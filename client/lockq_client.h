/*-------------------------------------------------------------------------
 *
 * lockq_client.h
 *		liblockq: take lockq locks from C the way you use a mutex.
 *
 * A lockqc_conn is one libpq connection shared by any number of threads,
 * plus a background thread that keeps waits and leases alive.  Blocking
 * waits do not keep a server backend busy: the library queues with
 * lockq_enqueue and waits for a NOTIFY on the connection's own channel,
 * heartbeating meanwhile.  Held locks are renewed at a third of their ttl
 * (auto-renew); if a lease cannot be renewed before its local deadline
 * (computed from a monotonic clock), lockqc_held() turns false and the
 * lost-lease callback fires.  If the connection breaks, the library
 * reconnects (a multi-host conninfo with target_session_attrs=read-write
 * follows a failover) and carries on.
 *
 * Copyright (c) 2026, lockq developers
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
extern "C"
{
#endif

/** An open connection to a lockq server.  Opaque. */
typedef struct lockqc_conn lockqc_conn;

/** One lock taken through a connection.  Opaque. */
typedef struct lockqc_handle lockqc_handle;

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
	int64_t		ttl_ms;			/**< lease length; default 30000 */
	int64_t		timeout_ms;		/**< lockqc_lock wait limit; <= 0 waits forever */
	int64_t		heartbeat_ms;	/**< longest gap between wait heartbeats the
								 * server allows before dropping the waiter;
								 * default 10000 */
	const char *owner;			/**< identity; NULL: unique per handle
								 * ("host:pid:thread:random") */
	bool		auto_renew;		/**< renew at ttl/3 while held; default true */
	lockqc_lost_cb on_lost;		/**< called once when the lease is lost */
	void	   *on_lost_arg;
	/**
	 * Cancellation hook: when *cancel becomes non-zero, a waiting
	 * lockqc_lock withdraws from the queue and returns LOCKQC_CANCELLED.
	 * Setting it from a signal handler is fine; call lockqc_wakeup()
	 * there too so that the wait notices at once.
	 */
	volatile sig_atomic_t *cancel;
} lockqc_opts;

/** Fills *opts with the defaults. */
extern void lockqc_opts_init(lockqc_opts *opts);

/**
 * Connects.  conninfo is a libpq connection string or URI (NULL or "" for
 * the PG* environment defaults).  On failure returns NULL and, if errmsg
 * is not NULL, sets *errmsg to a malloc'ed message the caller frees.
 */
extern lockqc_conn *lockqc_connect(const char *conninfo, char **errmsg);

/**
 * Releases every lock still held through c, withdraws its waits, frees
 * their handles and closes the connection.
 */
extern void lockqc_disconnect(lockqc_conn *c);

/**
 * Waits in FIFO order for lock_id and sets *out to a new handle.
 * Returns LOCKQC_OK, LOCKQC_TIMEOUT, LOCKQC_CANCELLED, or an error.  On
 * anything but LOCKQC_OK nothing is left queued or held, and *out is NULL.
 */
extern int	lockqc_lock(lockqc_conn *c, const char *lock_id,
						const lockqc_opts *opts, lockqc_handle **out);

/**
 * Takes lock_id only if it is free and nobody waits.  Returns LOCKQC_OK
 * (and *out), LOCKQC_NOT_AVAILABLE, or an error.
 */
extern int	lockqc_trylock(lockqc_conn *c, const char *lock_id,
						   const lockqc_opts *opts, lockqc_handle **out);

/**
 * Releases the lock and frees the handle (always, whatever it returns).
 * Returns LOCKQC_OK, LOCKQC_LOST when the lease had already been lost, or
 * an error.
 */
extern int	lockqc_unlock(lockqc_handle *h);

/** The grant's fencing token. */
extern int64_t lockqc_token(const lockqc_handle *h);

/**
 * True while the lock is held: false once the lease is known lost or its
 * local deadline has passed without a confirmed renewal.
 */
extern bool lockqc_held(const lockqc_handle *h);

/** The owner name the lock is held under. */
extern const char *lockqc_owner(const lockqc_handle *h);

/** The lock id. */
extern const char *lockqc_lock_id(const lockqc_handle *h);

/**
 * The message of the last error in this thread on c (or, if none, the
 * connection's last error).  Valid until the next call on c.
 */
extern const char *lockqc_errmsg(const lockqc_conn *c);

/** Wakes c's waits to re-check their cancel flags.  Async-signal-safe. */
extern void lockqc_wakeup(lockqc_conn *c);

/** A name for a status code. */
extern const char *lockqc_status_str(int status);

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
