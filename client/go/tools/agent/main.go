// Copyright (c) 2026, lockq developers
// This file is part of lockq, released under the PostgreSQL License
// (see LICENSE).

// Command agent is a lock client driven line by line, for the fault matrix
// of test/t/309_client_matrix.pl and 310_client_failover.pl (the same
// commands as client/python/tools/agent.py, without "block": goroutines
// are preempted, so nothing in Go blocks the renewals as the GIL or an
// event loop can).  argv: DSN [pool]; the locks go through a pgxpool.Pool
// of DSN, of four connections with "pool" and of one without.
//
//	acquire LOCK TTL_MS TIMEOUT_MS HEARTBEAT_MS   (TIMEOUT_MS -1: forever)
//	    "acquired TOKEN PID" or "failed ERROR ELAPSED_MS"; once acquired,
//	    a goroutine does "protected work": it reads the wall clock, then
//	    checks lease.Held(), and counts the time as work only if held; when
//	    Held() turns false it prints "stopped LAST_WORK_NS"
//	release      "released 0|1 ELAPSED_MS" or "failed ERROR ELAPSED_MS"
//	cancel LOCK TTL_MS DELAY_MS HEARTBEAT_MS
//	    Locker.Do with a context cancelled DELAY_MS later: "cancel_done
//	    cancelled|acquired|ERROR ELAPSED_MS"
//	ping         takes and releases a lock of its own: "pong ok|ERROR"
//	quit
package main

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgconn"
	"github.com/jackc/pgx/v4/pgxpool"

	"lockq"
)

var sayMu sync.Mutex

// say writes one whole line: the work goroutine's "stopped" may come at
// any moment.
func say(words ...interface{}) {
	sayMu.Lock()
	defer sayMu.Unlock()
	fmt.Fprintln(os.Stdout, words...)
}

// errName names an error as the matrix compares it.
func errName(err error) string {
	var pgErr *pgconn.PgError
	switch {
	case errors.Is(err, context.DeadlineExceeded):
		return "DeadlineExceeded"
	case errors.Is(err, context.Canceled):
		return "Canceled"
	case errors.Is(err, lockq.ErrLost):
		return "ErrLost"
	case errors.Is(err, lockq.ErrNotAvailable):
		return "ErrNotAvailable"
	case errors.As(err, &pgErr):
		return "PgError_" + pgErr.Code
	}
	return "error"
}

func ms(n string) time.Duration {
	v, err := strconv.Atoi(n)
	if err != nil {
		fmt.Fprintln(os.Stderr, "bad number:", n)
		os.Exit(2)
	}
	return time.Duration(v) * time.Millisecond
}

// work is the protected work of a lease, until Held() turns false.
func work(lease *lockq.Lease) {
	var last int64
	for {
		t := time.Now().UnixNano()
		if !lease.Held() {
			say("stopped", last)
			return
		}
		last = t
		time.Sleep(time.Millisecond)
	}
}

func main() {
	if len(os.Args) < 2 {
		fmt.Fprintln(os.Stderr, "usage: agent DSN [pool]")
		os.Exit(2)
	}
	ctx := context.Background()
	cfg, err := pgxpool.ParseConfig(os.Args[1])
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	cfg.MaxConns = 1
	if len(os.Args) > 2 && os.Args[2] == "pool" {
		cfg.MaxConns = 4
	}
	pool, err := pgxpool.ConnectConfig(ctx, cfg)
	if err == nil {
		var l *lockq.Locker
		if l, err = lockq.NewLocker(ctx, pool, &lockq.Config{
			Logf: func(f string, a ...interface{}) { fmt.Fprintf(os.Stderr, f+"\n", a...) }}); err == nil {
			serve(ctx, l)
			l.Close()
		}
		pool.Close()
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
}

// serve answers the commands on standard input until "quit" or its end.
func serve(ctx context.Context, l *lockq.Locker) {
	var lease *lockq.Lease
	in := bufio.NewScanner(os.Stdin)
	for in.Scan() {
		cmd := strings.Fields(in.Text())
		if len(cmd) == 0 {
			continue
		}
		t0 := time.Now()
		elapsed := func() int64 { return time.Since(t0).Milliseconds() }
		switch {
		case cmd[0] == "acquire" && len(cmd) == 5:
			actx, cancel := ctx, context.CancelFunc(func() {})
			if timeout := ms(cmd[3]); timeout >= 0 {
				actx, cancel = context.WithTimeout(ctx, timeout)
			}
			le, err := l.Lock(actx, cmd[1], lockq.Options{TTL: ms(cmd[2]), Heartbeat: ms(cmd[4])})
			cancel()
			if err != nil {
				say("failed", errName(err), elapsed())
				continue
			}
			lease = le
			say("acquired", le.Token, os.Getpid())
			go work(le)
		case cmd[0] == "release" && lease != nil:
			switch err := lease.Release(ctx); {
			case err == nil:
				say("released", 1, elapsed())
			case errors.Is(err, lockq.ErrLost):
				say("released", 0, elapsed())
			default:
				say("failed", errName(err), elapsed())
			}
		case cmd[0] == "cancel" && len(cmd) == 5:
			cctx, cancel := context.WithCancel(ctx)
			timer := time.AfterFunc(ms(cmd[3]), cancel)
			err := l.Do(cctx, cmd[1], lockq.Options{TTL: ms(cmd[2]), Heartbeat: ms(cmd[4])},
				func(context.Context, *lockq.Lease) error { return nil })
			timer.Stop()
			outcome := "acquired"
			if errors.Is(err, context.Canceled) && cctx.Err() != nil {
				outcome = "cancelled"
			} else if err != nil {
				outcome = errName(err)
			}
			cancel()
			say("cancel_done", outcome, elapsed())
		case cmd[0] == "ping":
			err := l.Do(ctx, fmt.Sprintf("agent-ping-%d", os.Getpid()), lockq.Options{NoWait: true},
				func(context.Context, *lockq.Lease) error { return nil })
			if err != nil {
				say("pong", errName(err))
			} else {
				say("pong", "ok")
			}
		case cmd[0] == "quit":
			return
		default:
			fmt.Fprintln(os.Stderr, "unknown command:", strings.Join(cmd, " "))
		}
	}
}
