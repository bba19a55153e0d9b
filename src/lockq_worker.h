/*-------------------------------------------------------------------------
 *
 * lockq_worker.h
 *		The lock server's entry points (lockq_worker.c).
 *
 * Copyright (c) 2026, lockq developers
 * This file is part of lockq, released under the PostgreSQL License
 * (see LICENSE).
 *
 * IDENTIFICATION
 *		src/lockq_worker.h
 *
 *-------------------------------------------------------------------------
 */
#ifndef LOCKQ_WORKER_H
#define LOCKQ_WORKER_H

#include "fmgr.h"

extern PGDLLEXPORT void lockq_worker_main(Datum main_arg);
extern void lq_worker_register(void);


#endif							/* LOCKQ_WORKER_H */
