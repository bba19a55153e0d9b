// Copyright (c) 2026, lockq developers
// This file is part of lockq, released under the PostgreSQL License
// (see LICENSE).

// Command lockq-example uses the lockq Go module (client/go) with a pgx v4
// pool: a fenced counter under several goroutines, or one lease held for a
// while.
//
//	lockq-example -dsn DSN [-workers 4 -iterations 25]   fenced counter
//	lockq-example -dsn DSN -hold 3s [-ttl 1s]            hold, then report
//
// Exit status: 0 done; 1 error or a lost update; 75 not granted within
// -timeout; 76 the lease was lost while held.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log"
	"os"
	"time"

	"github.com/jackc/pgx/v4"
	"github.com/jackc/pgx/v4/pgxpool"

	"lockq"
)

func main() {
	dsn := flag.String("dsn", os.Getenv("LOCKQ_DSN"), "connection string (libpq style or URL)")
	lockID := flag.String("lock", "lockq-example", "lock id")
	workers := flag.Int("workers", 4, "goroutines incrementing the fenced counter")
	iterations := flag.Int("iterations", 25, "increments per goroutine")
	ttl := flag.Duration("ttl", 10*time.Second, "lease")
	timeout := flag.Duration("timeout", time.Minute, "give up waiting after this long")
	hold := flag.Duration("hold", 0, "only hold the lock this long, then report")
	flag.Parse()

	ctx := context.Background()
	pool, err := pgxpool.Connect(ctx, *dsn)
	if err == nil {
		defer pool.Close()
		var l *lockq.Locker
		if l, err = lockq.NewLocker(ctx, pool, &lockq.Config{Logf: log.Printf}); err == nil {
			defer l.Close()
			if *hold > 0 {
				err = holdFor(ctx, l, *lockID, *ttl, *timeout, *hold)
			} else {
				err = count(ctx, pool, l, *lockID, *ttl, *timeout, *workers, *iterations)
			}
		}
	}
	switch {
	case err == nil:
		return
	case errors.Is(err, context.DeadlineExceeded):
		fmt.Println("not granted within", *timeout)
		os.Exit(75)
	case errors.Is(err, lockq.ErrLost):
		fmt.Println("lease lost")
		os.Exit(76)
	default:
		fmt.Fprintln(os.Stderr, "lockq-example:", err)
		os.Exit(1)
	}
}

// holdFor takes the lock, holds it (renewing) and says whether it still
// holds it then; a lost lease ends the hold at once.
func holdFor(ctx context.Context, l *lockq.Locker, lockID string, ttl, timeout, hold time.Duration) error {
	wctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	le, err := l.Lock(wctx, lockID, lockq.Options{TTL: ttl})
	if err != nil {
		return err
	}
	fmt.Printf("holding %q, token %d\n", lockID, le.Token)
	select {
	case <-time.After(hold):
	case <-le.Context().Done():
	}
	fmt.Printf("still held after the hold: %v\n", le.Held())
	return le.Release(ctx)
}

// count: workers increment a counter, each increment under the lock and
// fenced by its token in the same transaction.  Every update must land.
func count(ctx context.Context, pool *pgxpool.Pool, l *lockq.Locker, lockID string, ttl, timeout time.Duration, workers, iterations int) error {
	_, err := pool.Exec(ctx, `CREATE TABLE IF NOT EXISTS lockq_example_counter (n bigint);
		TRUNCATE lockq_example_counter; INSERT INTO lockq_example_counter VALUES (0)`)
	if err != nil {
		return err
	}
	errs := make(chan error, workers)
	for w := 0; w < workers; w++ {
		go func() {
			var err error
			for i := 0; i < iterations && err == nil; i++ {
				err = increment(ctx, pool, l, lockID, ttl, timeout)
			}
			errs <- err
		}()
	}
	for w := 0; w < workers; w++ {
		if e := <-errs; e != nil && err == nil {
			err = e
		}
	}
	if err != nil {
		return err
	}
	var n int64
	if err := pool.QueryRow(ctx, "SELECT n FROM lockq_example_counter").Scan(&n); err != nil {
		return err
	}
	fmt.Printf("counter %d (expected %d)\n", n, workers*iterations)
	if n != int64(workers*iterations) {
		return errors.New("lost updates")
	}
	return nil
}

// increment runs one fenced increment under the lock: the UPDATE takes
// effect only while the lease holds (lockq_holds in the same statement).
func increment(ctx context.Context, pool *pgxpool.Pool, l *lockq.Locker, lockID string, ttl, timeout time.Duration) error {
	wctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	return l.Do(wctx, lockID, lockq.Options{TTL: ttl}, func(lctx context.Context, le *lockq.Lease) error {
		return pool.BeginFunc(lctx, func(tx pgx.Tx) error {
			var n int64
			if err := tx.QueryRow(lctx, "SELECT n FROM lockq_example_counter").Scan(&n); err != nil {
				return err
			}
			tag, err := tx.Exec(lctx, "UPDATE lockq_example_counter SET n = $1 WHERE "+l.Schema()+
				".lockq_holds($2::text, $3::int8)", n+1, le.LockID, le.Token)
			if err == nil && tag.RowsAffected() != 1 {
				err = lockq.ErrLost // the fence refused the write: the lease had ended
			}
			return err
		})
	})
}
