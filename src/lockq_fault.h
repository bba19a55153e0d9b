/*-------------------------------------------------------------------------
 *
 * lockq_fault.h
 *		Named fault-injection points, compiled only into the test build.
 *
 * LQ_FAULT("name") marks a moment at which a test may make the process
 * fail in a chosen way (see lockq_fault.c).  Built with
 * -DLOCKQ_FAULT_INJECTION (make FAULT_INJECTION=1, which make test uses) a
 * point costs one atomic read while nothing is armed; in the production
 * build it compiles to nothing and lockq has no fault functions at all.
 *
 * Copyright (c) 2026, lockq developers
 * This file is part of lockq, released under the PostgreSQL License
 * (see LICENSE).
 *
 * IDENTIFICATION
 *		src/lockq_fault.h
 *
 *-------------------------------------------------------------------------
 */
#ifndef LOCKQ_FAULT_H
#define LOCKQ_FAULT_H

#include "postgres.h"

#ifdef LOCKQ_FAULT_INJECTION

extern void lq_fault_hit(const char *name);
extern Size lq_fault_shmem_size(void);
extern void lq_fault_shmem_startup(void);
extern void lq_fault_define_guc(void);
extern void lq_fault_arm_from_guc(void);
extern void lq_fault_set_server(int server);

#define LQ_FAULT(name) lq_fault_hit(name)

#else

#define LQ_FAULT(name) ((void) 0)
#define lq_fault_shmem_size() ((Size) 0)
#define lq_fault_shmem_startup() ((void) 0)
#define lq_fault_define_guc() ((void) 0)
#define lq_fault_arm_from_guc() ((void) 0)
#define lq_fault_set_server(server) ((void) 0)

#endif							/* LOCKQ_FAULT_INJECTION */

#endif							/* LOCKQ_FAULT_H */
