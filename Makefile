# lockq: fair, durable, lease-based distributed locks inside PostgreSQL.
#
#   make                    build the extension (PGXS), the client library
#                           and the CLI (client/)
#   make install            install the extension into PostgreSQL's
#                           directories (those of PG_CONFIG)
#   make install-client     install liblockq and the CLI into PREFIX
#                           (default /usr/local); make install PREFIX=dir
#                           installs both
#   make installcheck       regress, isolation and TAP tests, each against
#                           its own temporary cluster (run as a non-root user)
#   make test               everything, from a fresh Debian 12 machine as
#                           root: installs packages, builds the test build
#                           (FAULT_INJECTION=1), runs all tests
#   make run                a throw-away cluster with lockq and a live demo
#   make bench              the benchmark against pg_advisory_lock (ARGS=--quick)
#   make soak               10 minutes of contention: throughput, table and
#                           memory bounds (SOAK_SECONDS=120 for a short run)
#   make fuzz               fuzz the client's input parsers with libFuzzer
#                           (clang), FUZZ_SECONDS (default 60) per target
#   make torture            the randomized crash test for SECONDS (default
#                           600) with SEED (default random)
#   make deb                Debian packages, with debhelper and pg_buildext
#                           (into build-deb/, see debian/)
#   make test-deb           build them, install them on this machine (as
#                           root), try them (the README's session, the CLI,
#                           a program built with pkg-config), purge them
#
# Copyright (c) 2026, lockq developers
# This file is part of lockq, released under the PostgreSQL License
# (see LICENSE).

EXTENSION = lockq
MODULE_big = lockq
OBJS = src/lockq.o src/lockq_call.o src/lockq_clock.o src/lockq_durability.o \
	   src/lockq_fastpath.o src/lockq_fault.o src/lockq_fences.o \
	   src/lockq_guc.o src/lockq_hooks.o src/lockq_leases.o src/lockq_maint.o \
	   src/lockq_outbox.o src/lockq_policy.o src/lockq_recovery.o \
	   src/lockq_roles.o src/lockq_rules.o src/lockq_session.o src/lockq_shmem.o \
	   src/lockq_sql.o src/lockq_statefile.o src/lockq_tables.o \
	   src/lockq_views.o src/lockq_worker.o
DATA = $(wildcard sql/lockq--*.sql)
PGFILEDESC = "lockq - fair, durable, lease-based locks"

REGRESS = lockq_setup lockq_basic lockq_errors lockq_client lockq_views lockq_policy \
	  lockq_session lockq_security
REGRESS_OPTS = --temp-instance=./tmp_check --temp-config=test/regress.conf

ISOLATION = lockq_try lockq_release lockq_reentrant lockq_holds lockq_wait \
	    lockq_holds_session lockq_await lockq_revoke lockq_quick_release
ISOLATION_OPTS = --inputdir=test --temp-instance=./tmp_check_iso \
	--temp-config=test/isolation.conf

TAP_TESTS = 1
PROVE_TESTS = test/t/*.pl

EXTRA_CLEAN = tmp_check_iso output_iso tmp_old

PG_CPPFLAGS = -Isrc

# FAULT_INJECTION=1 builds the test build: named fault-injection points
# (src/lockq_fault.c) that tests arm from SQL.  The production build has
# none.  make test uses it; a change of flavour rebuilds every object.
FAULT_INJECTION ?= 0
ifeq ($(FAULT_INJECTION),1)
PG_CPPFLAGS += -DLOCKQ_FAULT_INJECTION
LQ_FLAVOUR = fault-injection
else
LQ_FLAVOUR = production
endif
$(shell test "$$(cat src/.flavour 2>/dev/null)" = "$(LQ_FLAVOUR)" || echo "$(LQ_FLAVOUR)" > src/.flavour)
PG_CFLAGS = -Wall -Wmissing-prototypes -Wno-unused-parameter

# EXTVERSION (from lockq.control) and PG_CONFIG
include common.mk
PGXS := $(shell $(PG_CONFIG) --pgxs)
include $(PGXS)

# PGXS does not track header dependencies: every object depends on them all.
$(OBJS): $(wildcard src/*.h) src/.flavour

# (Makefile.global resets PROVE_FLAGS, so this comes after the include)
PROVE_FLAGS += -I test/perl

.PHONY: test run bench check-regress check-isolation check-tap client \
	client-tests install-client clean-client

# The client library and the lockq CLI (client/); the TAP tests also need
# the library's test programs.  PGXS sets CFLAGS, CPPFLAGS and LDFLAGS for
# the server, and make would pass them on to the client's make when they
# came from the environment (as in a Debian build): it must not.
unexport CFLAGS CPPFLAGS LDFLAGS
all: client
client:
	$(MAKE) -C client PG_CONFIG=$(PG_CONFIG) all
client-tests:
	$(MAKE) -C client PG_CONFIG=$(PG_CONFIG) check-build
installcheck check-tap: client-tests

# make install puts only the extension into PostgreSQL's directories; the
# client goes into PREFIX with make install-client, or with make install
# when PREFIX is given on the command line.
install-client: client
	$(MAKE) -C client PG_CONFIG=$(PG_CONFIG) install
ifeq ($(origin PREFIX),command line)
install: install-client
endif
clean: clean-client
clean-client:
	$(MAKE) -C client clean
	$(MAKE) -C bench clean

test:
	./test/run-tests.sh

# Debian packages (debian/): make deb builds them into build-deb/ (DEB_DIR);
# make test-deb (as root) builds, installs and tries them, then purges
# them.  Not part of make test.  See test/deb.sh.
.PHONY: deb test-deb
deb:
	./test/deb.sh build
test-deb:
	./test/deb.sh test

run:
	./test/demo.sh

# lockq against pg_advisory_lock; ARGS="--quick" for a short run
bench:
	./bench/run-bench.sh $(ARGS)

# liblockq's and the CLI's input parsers (durations, NOTIFY payloads,
# conninfo, command lines) under libFuzzer with AddressSanitizer and
# UndefinedBehaviorSanitizer, FUZZ_SECONDS each; see client/fuzz/Makefile.
# (make test runs them briefly: test/t/307_client_fuzz.pl.)
.PHONY: fuzz
fuzz:
	$(MAKE) -C client/fuzz PG_CONFIG=$(PG_CONFIG) run

# The randomized crash test (test/t/121_crash_torture.pl, which make test runs for
# 40 s) for as long as asked: make torture SECONDS=600 [SEED=n].  Like make
# test, it builds and installs the test build first (as root: and runs the
# server as an unprivileged user); check-torture is the test alone.
.PHONY: torture check-torture
torture:
	LOCKQ_TEST_SUITES=torture LOCKQ_TORTURE_SECONDS=$(or $(SECONDS),600) \
	  LOCKQ_TORTURE_SEED=$(SEED) ./test/run-tests.sh
check-torture:
	LOCKQ_TORTURE_SECONDS=$(or $(LOCKQ_TORTURE_SECONDS),$(SECONDS),600) \
	  LOCKQ_TORTURE_SEED=$(or $(LOCKQ_TORTURE_SEED),$(SEED)) \
	  $(MAKE) check-tap PROVE_TESTS=test/t/121_crash_torture.pl

# liblockq's scenarios built with ThreadSanitizer, against a temporary
# cluster (also part of make test: TAP 303_client_tsan).
.PHONY: check-tsan
check-tsan:
	$(MAKE) -C client PG_CONFIG=$(PG_CONFIG) tsan
	$(MAKE) check-tap PROVE_TESTS=test/t/303_client_tsan.pl

# Ten minutes (SOAK_SECONDS) of contention, not part of make test; see
# test/soak.sh for what it checks and the bounds.
.PHONY: soak
soak:
	./test/soak.sh

# The modules of src/ depend on each other in one direction only (see
# DESIGN.md, "The modules"): fails on a cycle of includes or calls.
.PHONY: check-modules
check-modules: all
	perl test/check-modules.pl .

# Every TAP test, spec, regress test and fault point is in test/README.md.
.PHONY: check-test-index
check-test-index:
	perl test/check-test-index.pl .

# The three suites one by one (installcheck runs them all, stopping at the
# first failing one).
check-regress:
	$(pg_regress_installcheck) $(REGRESS_OPTS) $(REGRESS)

check-isolation:
	$(pg_isolation_regress_installcheck) $(ISOLATION_OPTS) $(ISOLATION)

check-tap:
	$(prove_installcheck)

# The suite's second configuration: these TAP tests run again with two lock
# servers (lockq.lock_servers = 2, set by LockqTest for LOCKQ_TEST_LOCK_SERVERS);
# 014_lock_servers runs two in the first.  test/README.md says which are
# left out, and why.
LOCK_SERVERS_TESTS = 001_fifo 002_cancel 003_expiry 004_session_locks \
	005_client_waiters 006_await 007_fences 008_lazy_arrivals 009_batch_wakeups \
	010_quick_release 011_rowless_grants 012_fast_path 013_reference_model \
	101_crash 102_worker_restart 103_worker_faults 104_batch_errors \
	105_no_revival 106_scoped_delay 107_wide_unsettled 108_rebuild_answers \
	109_restart_views 110_clock_jumps 111_table_locks 112_maintenance \
	113_reinstall 114_dump_restore 115_token_floor 116_preload_standby \
	117_failover 118_syncrep_wait 119_patroni 120_chaos 121_crash_torture \
	201_search_path_attacks 202_role_isolation 203_hint_collisions \
	204_expiry_wave
.PHONY: check-tap-servers
check-tap-servers:
	LOCKQ_TEST_LOCK_SERVERS=2 $(MAKE) check-tap \
	  PROVE_TESTS="$(LOCK_SERVERS_TESTS:%=test/t/%.pl)"
