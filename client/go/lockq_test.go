// Copyright (c) 2026, lockq developers
// This file is part of lockq, released under the PostgreSQL License
// (see LICENSE).

// These tests need a server with lockq: LOCKQ_TEST_DSN names it (TAP
// 403_go sets it); without it they are skipped, except the ones that need
// no server.
package lockq

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v4/pgxpool"
)

func setup(t *testing.T) (*pgxpool.Pool, *Locker, *[]string) {
	dsn := os.Getenv("LOCKQ_TEST_DSN")
	if dsn == "" {
		t.Skip("LOCKQ_TEST_DSN is not set")
	}
	ctx := context.Background()
	pool, err := pgxpool.Connect(ctx, dsn)
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	logged := &[]string{}
	l, err := NewLocker(ctx, pool, &Config{Logf: func(f string, a ...interface{}) {
		mu.Lock()
		*logged = append(*logged, fmt.Sprintf(f, a...))
		mu.Unlock()
	}})
	if err != nil {
		pool.Close()
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close(); pool.Close() })
	return pool, l, logged
}

func count(t *testing.T, pool *pgxpool.Pool, q string, args ...interface{}) int64 {
	var n int64
	if err := pool.QueryRow(context.Background(), q, args...).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

func TestParseNotice(t *testing.T) {
	ev, id, owner, ok := ParseNotice("granted 42 9 a b c:d:e host:1:2:ff")
	if !ok || ev != "granted" || id != "a b c:d:e" || owner != "host:1:2:ff" {
		t.Fatalf("got %q %q %q %v", ev, id, owner, ok)
	}
	for _, bad := range []string{"", "granted 1 3 ab", "granted 1 x abc d", "granted 1 0  d", "granted 1 300 a b"} {
		if _, _, _, ok := ParseNotice(bad); ok {
			t.Errorf("%q parsed", bad)
		}
	}
}

func TestCheckExtVersion(t *testing.T) {
	for v, want := range map[string]bool{"1.0": false, "1.1": true, "1.3": true, "2.0": true, "0.9": false, "x": false, "": false} {
		if got := CheckExtVersion(v) == nil; got != want {
			t.Errorf("CheckExtVersion(%q) ok = %v, want %v", v, got, want)
		}
	}
	if err := CheckExtVersion("1.0"); !strings.Contains(err.Error(), "ALTER EXTENSION lockq UPDATE") {
		t.Errorf("the message does not say what to do: %v", err)
	}
}

// Workers increment a counter, each increment under the lock and fenced
// by its token in the same transaction: every update lands.
func TestFencedCounter(t *testing.T) {
	pool, l, _ := setup(t)
	ctx := context.Background()
	if _, err := pool.Exec(ctx, `DROP TABLE IF EXISTS go_counter; CREATE TABLE go_counter (n bigint); INSERT INTO go_counter VALUES (0)`); err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	errs := make(chan error, 4)
	for w := 0; w < 4; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < 25; i++ {
				err := l.Do(ctx, "go:counter", Options{TTL: 10 * time.Second}, func(ctx context.Context, le *Lease) error {
					var n int64
					if err := pool.QueryRow(ctx, "SELECT n FROM go_counter").Scan(&n); err != nil {
						return err
					}
					tag, err := pool.Exec(ctx, "UPDATE go_counter SET n = $1 WHERE "+l.schema+".lockq_holds($2::text, $3::int8)",
						n+1, le.LockID, le.Token)
					if err == nil && tag.RowsAffected() != 1 {
						err = errors.New("the fence refused a write")
					}
					return err
				})
				if err != nil {
					errs <- err
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	if n := count(t, pool, "SELECT n FROM go_counter"); n != 100 {
		t.Fatalf("counter %d, want 100", n)
	}
}

// Renewals keep a short lease; Extend and Remaining work by hand; a
// manual lease ends at its ttl.
func TestRenewExtendRemaining(t *testing.T) {
	_, l, _ := setup(t)
	ctx := context.Background()
	le, err := l.Lock(ctx, "go:renew", Options{TTL: 900 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	time.Sleep(2 * time.Second) // three ttls: renewals must keep it
	if !le.Held() || le.Remaining() <= 0 || le.Remaining() > 900*time.Millisecond {
		t.Fatalf("held %v, remaining %v", le.Held(), le.Remaining())
	}
	if err := le.Extend(ctx, time.Minute); err != nil {
		t.Fatal(err)
	}
	if r := le.Remaining(); r < 50*time.Second {
		t.Fatalf("remaining %v after Extend(1 min)", r)
	}
	if err := le.Release(ctx); err != nil {
		t.Fatal(err)
	}
	if le.Held() || le.Remaining() != 0 {
		t.Fatal("held after release")
	}

	m, err := l.Lock(ctx, "go:manual", Options{TTL: 500 * time.Millisecond, ManualRenew: true})
	if err != nil {
		t.Fatal(err)
	}
	select {
	case <-m.Context().Done():
	case <-time.After(5 * time.Second):
		t.Fatal("a lease without renewals outlived its ttl")
	}
	if err := m.Release(ctx); !errors.Is(err, ErrLost) {
		t.Fatalf("release of an expired lease: %v, want ErrLost", err)
	}
}

// An administrator takes the lock: the holder's context ends at once,
// Do returns ErrLost, and the loss is logged.
func TestLostLease(t *testing.T) {
	pool, l, logged := setup(t)
	ctx := context.Background()
	err := l.Do(ctx, "go:lost", Options{TTL: time.Minute}, func(ctx context.Context, le *Lease) error {
		if _, err := pool.Exec(context.Background(), "SELECT "+l.schema+".lockq_force_release('go:lost')"); err != nil {
			return err
		}
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(10 * time.Second):
			return errors.New("the lease's context did not end")
		}
	})
	if !errors.Is(err, ErrLost) {
		t.Fatalf("Do: %v, want ErrLost", err)
	}
	if !strings.Contains(strings.Join(*logged, "\n"), `lease of "go:lost"`) {
		t.Fatalf("no log line for the lost lease: %q", *logged)
	}
}

// NoWait on a held lock; a wait that times out leaves nothing queued;
// Forget leaves the grant to its owner.
func TestTryTimeoutForget(t *testing.T) {
	pool, l, _ := setup(t)
	ctx := context.Background()
	held, err := l.Lock(ctx, "go:busy", Options{Owner: "go-test-owner"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := l.Lock(ctx, "go:busy", Options{NoWait: true}); !errors.Is(err, ErrNotAvailable) {
		t.Fatalf("NoWait: %v, want ErrNotAvailable", err)
	}
	wctx, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
	start := time.Now()
	_, err = l.Lock(wctx, "go:busy", Options{})
	cancel()
	if !errors.Is(err, context.DeadlineExceeded) || time.Since(start) > 2*time.Second {
		t.Fatalf("timed wait: %v after %v", err, time.Since(start))
	}
	if n := count(t, pool, "SELECT count(*) FROM "+l.schema+".lockq_waiters WHERE lock_id = 'go:busy'"); n != 0 {
		t.Fatalf("%d waiters left after the timeout", n)
	}
	held.Forget()
	if held.Held() {
		t.Fatal("a forgotten lease says held")
	}
	if n := count(t, pool, "SELECT count(*) FROM "+l.schema+".lockq_locks WHERE lock_id = 'go:busy' AND owner = 'go-test-owner'"); n != 1 {
		t.Fatal("Forget released the grant")
	}
	if n := count(t, pool, "SELECT count(*) FROM "+l.schema+".lockq_locks WHERE lock_id = 'go:busy' AND expires > now() + interval '20 s'"); n != 1 {
		t.Fatal("the grant lost its lease")
	}
	var ok bool
	if err := pool.QueryRow(ctx, "SELECT "+l.schema+".lockq_release('go:busy', 'go-test-owner')").Scan(&ok); err != nil || !ok {
		t.Fatalf("release by owner: %v %v", ok, err)
	}
}
