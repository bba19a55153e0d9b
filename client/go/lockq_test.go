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

// waiter waits for a lock in a goroutine and releases it once granted.
type waiter struct {
	got     chan error
	granted time.Time
}

// queueBehind starts a waiter for lockID and returns once it is queued.
func queueBehind(t *testing.T, pool *pgxpool.Pool, l *Locker, lockID string, o Options) *waiter {
	w := &waiter{got: make(chan error, 1)}
	go func() {
		le, err := l.Lock(context.Background(), lockID, o)
		w.granted = time.Now()
		if err == nil {
			err = le.Release(context.Background())
		}
		w.got <- err
	}()
	for count(t, pool, "SELECT count(*) FROM "+l.schema+".lockq_waiters WHERE lock_id = $1", lockID) == 0 {
		time.Sleep(10 * time.Millisecond)
	}
	return w
}

// grantedWithin fails unless the waiter is granted within bound of since.
func (w *waiter) grantedWithin(t *testing.T, since time.Time, bound time.Duration) {
	select {
	case err := <-w.got:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("the waiter was not granted")
	}
	if d := w.granted.Sub(since); d > bound {
		t.Fatalf("the waiter was granted %v after the release", d)
	}
}

// The listener's backend is terminated and the holder releases at once,
// before the listener is back: the grant's notice is lost, yet the waiter
// (whose heartbeat is 10 s away) learns of it within a few seconds, as
// the listener reconnects and wakes every wait; and the new listener
// carries the next hand-off's notice.
func TestListenerReconnects(t *testing.T) {
	pool, l, logged := setup(t)
	ctx := context.Background()
	listenerPid := func() int64 {
		return count(t, pool, "SELECT coalesce(max(pid), 0) FROM pg_stat_activity WHERE query = $1",
			"LISTEN "+`"`+l.channel+`"`)
	}
	first := listenerPid()
	if first == 0 {
		t.Fatal("no listener backend")
	}
	for round := 0; round < 2; round++ {
		held, err := l.Lock(ctx, "go:relisten", Options{})
		if err != nil {
			t.Fatal(err)
		}
		w := queueBehind(t, pool, l, "go:relisten", Options{Heartbeat: 30 * time.Second})
		if round == 0 {
			if count(t, pool, "SELECT count(*) FROM pg_terminate_backend($1::int) AS t(ok) WHERE ok", first) != 1 {
				t.Fatal("the listener's backend was not terminated")
			}
		}
		released := time.Now()
		if err := held.Release(ctx); err != nil {
			t.Fatal(err)
		}
		w.grantedWithin(t, released, 3*time.Second) // its heartbeat was 10 s away
	}
	if now := listenerPid(); now == 0 || now == first {
		t.Fatalf("listener backend %d, was %d: not reconnected", now, first)
	}
	if !strings.Contains(strings.Join(*logged, "\n"), "the listener connection failed") {
		t.Fatalf("the failure was not logged: %q", *logged)
	}
}

// Every backend of the pool is terminated (as a switchover does: each
// pooled connection fails with 57P01 when next used) while one lease is
// held and another waits with heartbeats every half second: the wait
// goes on through new connections, and the release succeeds at once and
// hands the lock on, instead of failing on a dead connection and leaving
// the lock to the end of its lease.
func TestPoolBackendsTerminated(t *testing.T) {
	pool, l, _ := setup(t)
	ctx := context.Background()
	held, err := l.Lock(ctx, "go:terminated", Options{TTL: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	w := queueBehind(t, pool, l, "go:terminated", Options{Heartbeat: 1500 * time.Millisecond})
	admin, err := pgxpool.Connect(ctx, os.Getenv("LOCKQ_TEST_DSN"))
	if err != nil {
		t.Fatal(err)
	}
	defer admin.Close()
	var mine, n int64
	var at time.Time
	if err := admin.QueryRow(ctx, "SELECT pg_backend_pid(), clock_timestamp()").Scan(&mine, &at); err != nil {
		t.Fatal(err)
	}
	// the pool's connections, but the listener's (a heartbeat may have one
	// checked out)
	others := `FROM pg_stat_activity WHERE datname = current_database()
		AND backend_type = 'client backend' AND pid <> $1 AND query NOT LIKE 'LISTEN %'`
	if err := admin.QueryRow(ctx, "SELECT count(*) "+others+" AND pg_terminate_backend(pid)", mine).Scan(&n); err != nil {
		t.Fatal(err)
	}
	if n == 0 {
		t.Fatal("no backend of the pool to terminate")
	}
	// a heartbeat met a dead connection and went on through a new one
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		if err := admin.QueryRow(ctx, "SELECT count(*) "+others+" AND backend_start > $2", mine, at).Scan(&n); err != nil {
			t.Fatal(err)
		}
		if n > 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the pool opened no new connection")
		}
	}
	select {
	case err := <-w.got:
		t.Fatalf("the wait ended while the lock was held: %v", err)
	default:
	}
	released := time.Now()
	if err := held.Release(ctx); err != nil {
		t.Fatalf("release after the pool's backends were terminated: %v", err)
	}
	w.grantedWithin(t, released, 2*time.Second)
}
