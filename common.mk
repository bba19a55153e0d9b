# common.mk -- what every Makefile of lockq shares: the version and the
# PostgreSQL to build against.
#
#   EXTVERSION   lockq's version: default_version of lockq.control, the
#                one place it is written.  The extension, liblockq
#                (lockqc_version()), the lockq CLI (--version), lockq.pc
#                and the Debian packages all take it from here.
#   PG_CONFIG    the pg_config of the PostgreSQL 15 to build against: as
#                given (make PG_CONFIG=...), else Debian's for version 15
#                when installed (several versions can be, and the pg_config
#                on PATH is then the newest's), else the one on PATH.
#   PQ_CFLAGS, PQ_LIBS   compiling and linking against its libpq
#
# Copyright (c) 2026, lockq developers
# This file is part of lockq, released under the PostgreSQL License
# (see LICENSE).

LOCKQ_TOP := $(patsubst %/,%,$(dir $(lastword $(MAKEFILE_LIST))))
LOCKQ_CONTROL := $(LOCKQ_TOP)/lockq.control

EXTVERSION := $(shell sed -n "s/^default_version[[:space:]]*=[[:space:]]*'\([^']*\)'.*/\1/p" $(LOCKQ_CONTROL))
ifeq ($(EXTVERSION),)
$(error cannot read default_version from $(LOCKQ_CONTROL))
endif

ifeq ($(wildcard /usr/lib/postgresql/15/bin/pg_config),)
PG_CONFIG ?= pg_config
else
PG_CONFIG ?= /usr/lib/postgresql/15/bin/pg_config
endif

PQ_CFLAGS := -I$(shell $(PG_CONFIG) --includedir)
PQ_LIBS := -L$(shell $(PG_CONFIG) --libdir) -lpq
