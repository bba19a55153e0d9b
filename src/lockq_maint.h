/*-------------------------------------------------------------------------
 *
 * lockq_maint.h
 *		What a database administrator's commands may do to the lock
 *		server's tables (lockq_maint.c).
 *
 * Copyright (c) 2026, lockq developers
 * This file is part of lockq, released under the PostgreSQL License
 * (see LICENSE).
 *
 * IDENTIFICATION
 *		src/lockq_maint.h
 *
 *-------------------------------------------------------------------------
 */
#ifndef LOCKQ_MAINT_H
#define LOCKQ_MAINT_H

#include "nodes/nodes.h"

extern void lq_maint_check_utility(Node *parsetree);

#endif							/* LOCKQ_MAINT_H */
