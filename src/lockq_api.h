/*-------------------------------------------------------------------------
 *
 * lockq_api.h
 *		The backend side (lockq_api.c): availability checks, the call to the
 *		lock server, the backend hooks.
 *
 * Copyright (c) 2026, lockq developers
 * This file is part of lockq, released under the PostgreSQL License
 * (see LICENSE).
 *
 * IDENTIFICATION
 *		src/lockq_api.h
 *
 *-------------------------------------------------------------------------
 */
#ifndef LOCKQ_API_H
#define LOCKQ_API_H

#include "lockq.h"

extern bool lq_is_available(void);
extern void lq_check_available(void);
extern void lq_install_backend_hooks(void);


#endif							/* LOCKQ_API_H */
