/*-------------------------------------------------------------------------
 *
 * lockq_maint.c
 *		Maintenance commands on the lock server's tables (lockq.owners,
 *		lockq.queue, lockq.unsettled): which are safe, which are refused.
 *
 * The lock server keeps the lock state in its memory and mirrors it into
 * these tables with the heap routines, remembering where each row is.
 * Commands that rewrite a table (VACUUM FULL, CLUSTER, ALTER TABLE ... SET
 * TABLESPACE, a pg_squeeze-style swap) move every row: they are safe
 * because the lock server notices the new file at its next batch and loads
 * its state anew before it writes anything (lq_tables_rewritten).  VACUUM,
 * ANALYZE and REINDEX (CONCURRENTLY too) leave the rows where they are.
 *
 * Refused, in every backend, with a hint at the safe way:
 *	- TRUNCATE, which would drop grants and waiters the lock server still
 *	  serves (lockq_force_release ends grants; DROP EXTENSION ends all);
 *	- ALTER TABLE other than storage parameters, statistics targets,
 *	  CLUSTER ON and SET TABLESPACE, and renaming: the lock server forms
 *	  the rows itself, in the shape the install script gave them (ALTER
 *	  EXTENSION lockq UPDATE may change them, and is not refused);
 *	- triggers, rules and row-level security policies: the lock server's
 *	  writes bypass them, so a tool that copies a table by capturing its
 *	  changes with a trigger (pg_repack) would lose writes.
 *
 * Copyright (c) 2026, lockq developers
 * This file is part of lockq, released under the PostgreSQL License
 * (see LICENSE).
 *
 * IDENTIFICATION
 *		src/lockq_maint.c
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "catalog/namespace.h"
#include "commands/extension.h"
#include "nodes/parsenodes.h"
#include "utils/lsyscache.h"

#include "lockq.h"
#include "lockq_maint.h"

/*
 * lq_is_server_table: is rv one of the lock server's tables?  Looked
 * up without a lock, and an unknown name is not ours: the command itself
 * reports it.
 */
static bool
lq_is_server_table(const RangeVar *rv)
{
	Oid			relid;
	Oid			nsp;
	char	   *name;
	bool		ours;

	if (rv == NULL)
		return false;
	relid = RangeVarGetRelid(rv, NoLock, true);
	if (!OidIsValid(relid))
		return false;
	nsp = get_namespace_oid(LQ_SCHEMA, true);
	if (!OidIsValid(nsp) || get_rel_namespace(relid) != nsp)
		return false;
	name = get_rel_name(relid);
	ours = name != NULL &&
		(strcmp(name, LQ_OWNERS_TABLE) == 0 ||
		 strcmp(name, LQ_QUEUE_TABLE) == 0 ||
		 strcmp(name, LQ_UNSETTLED_TABLE) == 0);
	return ours;
}

/* lq_refuse raises the error for command on table rv, with hint. */
static void
lq_refuse(const RangeVar *rv, const char *command, const char *hint)
{
	ereport(ERROR,
			(errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE),
			 errmsg("%s is not allowed on table \"%s.%s\"", command,
					LQ_SCHEMA, rv->relname),
			 errdetail("The lockq lock server keeps this table in step with the locks it serves from memory."),
			 errhint("%s", hint)));
}

/*
 * lq_safe_alter: does this ALTER TABLE subcommand leave the rows and their
 * shape alone (or only move the file, which the lock server notices)?
 */
static bool
lq_safe_alter(const AlterTableCmd *cmd)
{
	switch (cmd->subtype)
	{
		case AT_SetRelOptions:
		case AT_ResetRelOptions:
		case AT_SetStatistics:
		case AT_SetOptions:
		case AT_ResetOptions:
		case AT_ClusterOn:
		case AT_DropCluster:
		case AT_SetTableSpace:
			return true;
		default:
			return false;
	}
}

/*
 * lq_maint_check_utility refuses a utility statement that would break the
 * lock server's tables (see the top of this file), before it runs.  The
 * extension's own scripts (CREATE and ALTER EXTENSION) may do anything.
 * Raises object_not_in_prerequisite_state.
 */
void
lq_maint_check_utility(Node *parsetree)
{
	const char *vacuum_hint = "VACUUM (FULL), CLUSTER and REINDEX are safe on lockq's tables.";

	if (creating_extension)
		return;

	switch (nodeTag(parsetree))
	{
		case T_TruncateStmt:
			{
				ListCell   *lc;

				foreach(lc, ((TruncateStmt *) parsetree)->relations)
				{
					RangeVar   *rv = lfirst_node(RangeVar, lc);

					if (lq_is_server_table(rv))
						lq_refuse(rv, "TRUNCATE",
								  "End grants with lockq_force_release(), or DROP EXTENSION lockq to end every lock.");
				}
				break;
			}
		case T_AlterTableStmt:
			{
				AlterTableStmt *stmt = (AlterTableStmt *) parsetree;
				ListCell   *lc;

				if (!lq_is_server_table(stmt->relation))
					break;
				foreach(lc, stmt->cmds)
				{
					if (!lq_safe_alter(lfirst_node(AlterTableCmd, lc)))
						lq_refuse(stmt->relation, "this ALTER TABLE",
								  "Storage parameters, statistics targets, CLUSTER ON and SET TABLESPACE may be changed; ALTER EXTENSION lockq UPDATE changes the rest.");
				}
				break;
			}
		case T_RenameStmt:
			{
				RenameStmt *stmt = (RenameStmt *) parsetree;

				if (lq_is_server_table(stmt->relation))
					lq_refuse(stmt->relation, "renaming", vacuum_hint);
				break;
			}
		case T_CreateTrigStmt:
			if (lq_is_server_table(((CreateTrigStmt *) parsetree)->relation))
				lq_refuse(((CreateTrigStmt *) parsetree)->relation,
						  "a trigger", "The lock server's writes bypass triggers; to compact the table, use VACUUM FULL or CLUSTER.");
			break;
		case T_RuleStmt:
			if (lq_is_server_table(((RuleStmt *) parsetree)->relation))
				lq_refuse(((RuleStmt *) parsetree)->relation,
						  "a rule", "The lock server's writes bypass rules.");
			break;
		case T_CreatePolicyStmt:
			if (lq_is_server_table(((CreatePolicyStmt *) parsetree)->table))
				lq_refuse(((CreatePolicyStmt *) parsetree)->table,
						  "a row security policy", "The lock server's writes bypass policies; privileges on the views control who sees what.");
			break;
		default:
			break;
	}
}
