// Copyright (c) 2026, lockq developers
// This file is part of lockq, released under the PostgreSQL License
// (see LICENSE).

// Command lockq-example uses lockq from Go with pgx v4 (Debian's
// golang-github-jackc-pgx-v4-dev): the client-side wait over LISTEN/NOTIFY
// with heartbeats, auto-renewal, a context cancelled on lease loss, and
// fenced writes.  Copy Locker and Lease into your program; main shows them
// at work:
//
//	lockq-example -dsn DSN [-workers 4 -iterations 25]   fenced counter
//	lockq-example -dsn DSN -hold 3s [-ttl 1s]            hold, then report
//
// Exit status: 0 done; 1 error or a lost update; 75 not granted within
// -timeout; 76 the lease was lost while held.
//
// The protocol is liblockq's (client/lockq_client.c): lockq_enqueue with our
// channel, lockq_heartbeat every third of the heartbeat interval and on each
// notice (a notice is only a wake-up), lockq_cancel on timeout; lockq_renew
// every third of the ttl, with a local deadline on the monotonic clock
// (time.Now carries one) counted from when the request was sent.  Statements
// run on the pgxpool, one at a time; a dedicated connection LISTENs.
// Durations go as seconds through make_interval, never as bare numbers.
package main

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"flag"
	"fmt"
	"os"
	"strconv"
	"sync"
	"time"

	"github.com/jackc/pgconn"
	"github.com/jackc/pgx/v4"
	"github.com/jackc/pgx/v4/pgxpool"
)

// ErrLost: the lease ended before it was released.
var ErrLost = errors.New("lockq: the lease was lost")

// ErrNotAvailable: Options.NoWait and the lock is taken or queued for.
var ErrNotAvailable = errors.New("lockq: the lock is not available")

// schemaQuery finds the schema of lockq's functions: lockq (1.1) or the
// extension's (1.0).
const schemaQuery = `SELECT n.nspname FROM pg_catalog.pg_extension e
 JOIN pg_catalog.pg_depend d
   ON d.refclassid OPERATOR(pg_catalog.=) 'pg_catalog.pg_extension'::pg_catalog.regclass
  AND d.refobjid OPERATOR(pg_catalog.=) e.oid
  AND d.classid OPERATOR(pg_catalog.=) 'pg_catalog.pg_proc'::pg_catalog.regclass
  AND d.deptype OPERATOR(pg_catalog.=) 'e'
 JOIN pg_catalog.pg_proc p ON p.oid OPERATOR(pg_catalog.=) d.objid
 JOIN pg_catalog.pg_namespace n ON n.oid OPERATOR(pg_catalog.=) p.pronamespace
 WHERE e.extname OPERATOR(pg_catalog.=) 'lockq'
   AND p.proname OPERATOR(pg_catalog.=) 'lockq_get'`

const secs = "pg_catalog.make_interval(secs => %s::pg_catalog.float8)"

// Locker serves the leases of one pool: one listener connection, its
// channel, and the wake-up channels of the leases waiting or held.
type Locker struct {
	pool     *pgxpool.Pool
	schema   string // quoted
	channel  string
	listener *pgx.Conn
	stop     context.CancelFunc
	mu       sync.Mutex
	wake     map[[2]string]chan string // (lock id, owner) -> notice events
}

// NewLocker looks up lockq's schema and starts listening.
func NewLocker(ctx context.Context, pool *pgxpool.Pool) (*Locker, error) {
	var schema string
	if err := pool.QueryRow(ctx, schemaQuery).Scan(&schema); err != nil {
		return nil, fmt.Errorf("lockq extension: %w", err)
	}
	l := &Locker{pool: pool, schema: pgx.Identifier{schema}.Sanitize(),
		channel: "lockq_" + randomHex(), wake: map[[2]string]chan string{}}
	conn, err := pgx.ConnectConfig(ctx, pool.Config().ConnConfig.Copy())
	if err != nil {
		return nil, err
	}
	if _, err := conn.Exec(ctx, "LISTEN "+pgx.Identifier{l.channel}.Sanitize()); err != nil {
		conn.Close(ctx)
		return nil, err
	}
	l.listener = conn
	lctx, stop := context.WithCancel(context.Background())
	l.stop = stop
	go l.listen(lctx)
	return l, nil
}

// Close stops listening.
func (l *Locker) Close() {
	l.stop()
}

// listen hands each notice to its lease.  If the connection breaks,
// waiters still learn of their grants from their heartbeats.
func (l *Locker) listen(ctx context.Context) {
	defer l.listener.Close(context.Background())
	for {
		n, err := l.listener.WaitForNotification(ctx)
		if err != nil {
			return
		}
		event, lockID, owner, ok := parseNotice(n.Payload)
		if !ok || n.Channel != l.channel {
			continue
		}
		l.mu.Lock()
		if ch := l.wake[[2]string{lockID, owner}]; ch != nil {
			select {
			case ch <- event:
			default: // one pending wake-up is enough
			}
		}
		l.mu.Unlock()
	}
}

// parseNotice reads "<event> <token> <length> <lock id> <owner>"; the length
// counts bytes of the lock id, which may contain spaces.
func parseNotice(payload string) (event, lockID, owner string, ok bool) {
	f := bytes.SplitN([]byte(payload), []byte(" "), 4)
	if len(f) != 4 {
		return
	}
	n, err := strconv.Atoi(string(f[2]))
	rest := f[3]
	if err != nil || n < 1 || n > 255 || len(rest) < n+2 || rest[n] != ' ' {
		return
	}
	return string(f[0]), string(rest[:n]), string(rest[n+1:]), true
}

func randomHex() string {
	b := make([]byte, 8)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

func seconds(d time.Duration) string {
	return strconv.FormatFloat(d.Seconds(), 'f', -1, 64)
}

// Options of a lease.  Zero values mean the defaults.
type Options struct {
	TTL       time.Duration // lease, renewed every TTL/3 (default 30 s)
	Heartbeat time.Duration // the wait's liveness bound on the server (default 10 s)
	NoWait    bool          // lockq_try: ErrNotAvailable instead of waiting
}

// Lease is a held lock.  Token is the fencing token; Context() is cancelled
// when the lease is lost or released.
type Lease struct {
	Token    int64
	LockID   string
	Owner    string
	l        *Locker
	ttl      time.Duration
	ctx      context.Context
	cancel   context.CancelFunc
	mu       sync.Mutex
	deadline time.Time   // the local lease end
	timer    *time.Timer // fires at deadline
	lost     bool
}

// Lock waits in FIFO order until the lock is granted or ctx ends (then the
// wait leaves the queue, and a grant that raced with it is released).
func (l *Locker) Lock(ctx context.Context, lockID string, o Options) (*Lease, error) {
	if o.TTL <= 0 {
		o.TTL = 30 * time.Second
	}
	if o.Heartbeat <= 0 {
		o.Heartbeat = 10 * time.Second
	}
	host, _ := os.Hostname()
	le := &Lease{LockID: lockID, Owner: fmt.Sprintf("%s:%d:%s", host, os.Getpid(), randomHex()),
		l: l, ttl: o.TTL}
	wake := make(chan string, 1)
	key := [2]string{lockID, le.Owner}
	l.mu.Lock()
	l.wake[key] = wake
	l.mu.Unlock()

	sent := time.Now()
	var token *int64
	var err error
	if o.NoWait {
		err = l.pool.QueryRow(ctx, "SELECT "+l.schema+".lockq_try($1::text, $2::text, "+
			fmt.Sprintf(secs, "$3")+")", lockID, le.Owner, seconds(o.TTL)).Scan(&token)
		if err == nil && token == nil {
			err = ErrNotAvailable
		}
	} else {
		token, sent, err = le.wait(ctx, wake, o)
	}
	if err != nil {
		l.forget(key)
		return nil, err
	}
	le.Token = *token
	le.deadline = sent.Add(o.TTL)
	le.ctx, le.cancel = context.WithCancel(context.Background())
	le.timer = time.AfterFunc(time.Until(le.deadline), le.expire)
	go le.keep(wake, sent)
	return le, nil
}

func (l *Locker) forget(key [2]string) {
	l.mu.Lock()
	delete(l.wake, key)
	l.mu.Unlock()
}

// wait queues and heartbeats until granted; on ctx's end it withdraws.
func (le *Lease) wait(ctx context.Context, wake chan string, o Options) (*int64, time.Time, error) {
	l := le.l
	enqueue := "SELECT " + l.schema + ".lockq_enqueue($1::text, $2::text, " +
		fmt.Sprintf(secs, "$3") + ", $4::text, " + fmt.Sprintf(secs, "$5") + ")"
	heartbeat := "SELECT " + l.schema + ".lockq_heartbeat($1::text, $2::text)"
	var token *int64
	sent := time.Now()
	err := l.pool.QueryRow(ctx, enqueue, le.LockID, le.Owner, seconds(o.TTL), l.channel,
		seconds(o.Heartbeat)).Scan(&token)
	for err == nil && token == nil {
		select {
		case <-ctx.Done():
			err = ctx.Err()
			continue
		case <-wake:
		case <-time.After(time.Until(sent.Add(o.Heartbeat / 3))):
		}
		sent = time.Now()
		err = l.pool.QueryRow(ctx, heartbeat, le.LockID, le.Owner).Scan(&token)
		var pgErr *pgconn.PgError
		if errors.As(err, &pgErr) && pgErr.Code == "55000" { // dropped: queue again
			err = l.pool.QueryRow(ctx, enqueue, le.LockID, le.Owner, seconds(o.TTL),
				l.channel, seconds(o.Heartbeat)).Scan(&token)
		}
	}
	if err != nil {
		_, _ = l.pool.Exec(context.Background(), "SELECT "+l.schema+".lockq_cancel($1::text, $2::text)",
			le.LockID, le.Owner)
	}
	return token, sent, err
}

// Context is cancelled when the lease is lost (or released).
func (le *Lease) Context() context.Context { return le.ctx }

// keep renews every ttl/3 and checks "lost" notices with lockq_holds.  A
// renewal that fails is tried again soon; the timer at the local lease end
// declares the lease lost if none succeeds in time.
func (le *Lease) keep(wake chan string, sent time.Time) {
	l := le.l
	renew := "SELECT " + l.schema + ".lockq_renew($1::text, $2::text, $3::int8, " + fmt.Sprintf(secs, "$4") + ")"
	holds := "SELECT " + l.schema + ".lockq_holds($1::text, $2::int8)"
	next := sent.Add(le.ttl / 3)
	for {
		select {
		case <-le.ctx.Done(): // lost or released
			return
		case event := <-wake:
			var ok bool
			if event == "lost" && l.pool.QueryRow(le.ctx, holds, le.LockID, le.Token).Scan(&ok) == nil && !ok {
				le.lose()
				return
			}
		case <-time.After(time.Until(next)):
			var ok bool
			sent := time.Now()
			err := l.pool.QueryRow(le.ctx, renew, le.LockID, le.Owner, le.Token, seconds(le.ttl)).Scan(&ok)
			switch {
			case err != nil:
				next = time.Now().Add(time.Second)
			case !ok:
				le.lose()
				return
			default:
				le.extend(sent.Add(le.ttl))
				next = sent.Add(le.ttl / 3)
			}
		}
	}
}

// extend moves the local deadline after a confirmed renewal, unless it
// has passed already.
func (le *Lease) extend(deadline time.Time) {
	le.mu.Lock()
	defer le.mu.Unlock()
	if le.lost || !time.Now().Before(le.deadline) {
		return
	}
	le.deadline = deadline
	le.timer.Reset(time.Until(deadline))
}

// expire runs at the local deadline: lost, unless a renewal moved it.
func (le *Lease) expire() {
	le.mu.Lock()
	defer le.mu.Unlock()
	if !time.Now().Before(le.deadline) {
		le.lost = true
		le.cancel()
	}
}

func (le *Lease) lose() {
	le.mu.Lock()
	defer le.mu.Unlock()
	le.lost = true
	le.cancel()
}

// Held reports whether the lease is still valid.
func (le *Lease) Held() bool {
	le.mu.Lock()
	defer le.mu.Unlock()
	return !le.lost && le.ctx.Err() == nil && time.Now().Before(le.deadline)
}

// Release releases the lock; ErrLost if the lease had been lost.
func (le *Lease) Release(ctx context.Context) error {
	held := le.Held()
	le.timer.Stop()
	le.cancel()
	le.l.forget([2]string{le.LockID, le.Owner})
	var ok bool
	err := le.l.pool.QueryRow(ctx, "SELECT "+le.l.schema+".lockq_release($1::text, $2::text, $3::int8)",
		le.LockID, le.Owner, le.Token).Scan(&ok)
	if err != nil {
		return err
	}
	if !ok || !held {
		return ErrLost
	}
	return nil
}

// --- the example ---------------------------------------------------------

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
		var l *Locker
		if l, err = NewLocker(ctx, pool); err == nil {
			defer l.Close()
			if *hold > 0 {
				err = holdFor(ctx, l, *lockID, *ttl, *timeout, *hold)
			} else {
				err = count(ctx, l, *lockID, *ttl, *timeout, *workers, *iterations)
			}
		}
	}
	switch {
	case err == nil:
		return
	case errors.Is(err, context.DeadlineExceeded):
		fmt.Println("not granted within", *timeout)
		os.Exit(75)
	case errors.Is(err, ErrLost):
		fmt.Println("lease lost")
		os.Exit(76)
	default:
		fmt.Fprintln(os.Stderr, "lockq-example:", err)
		os.Exit(1)
	}
}

// holdFor takes the lock, holds it (renewing) and says whether it still
// holds it then; a lost lease ends the hold at once.
func holdFor(ctx context.Context, l *Locker, lockID string, ttl, timeout, hold time.Duration) error {
	wctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	le, err := l.Lock(wctx, lockID, Options{TTL: ttl})
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
func count(ctx context.Context, l *Locker, lockID string, ttl, timeout time.Duration, workers, iterations int) error {
	_, err := l.pool.Exec(ctx, `CREATE TABLE IF NOT EXISTS lockq_example_counter (n bigint);
		TRUNCATE lockq_example_counter; INSERT INTO lockq_example_counter VALUES (0)`)
	if err != nil {
		return err
	}
	errs := make(chan error, workers)
	for w := 0; w < workers; w++ {
		go func() {
			var err error
			for i := 0; i < iterations && err == nil; i++ {
				err = increment(ctx, l, lockID, ttl, timeout)
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
	if err := l.pool.QueryRow(ctx, "SELECT n FROM lockq_example_counter").Scan(&n); err != nil {
		return err
	}
	fmt.Printf("counter %d (expected %d)\n", n, workers*iterations)
	if n != int64(workers*iterations) {
		return errors.New("lost updates")
	}
	return nil
}

func increment(ctx context.Context, l *Locker, lockID string, ttl, timeout time.Duration) error {
	wctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	le, err := l.Lock(wctx, lockID, Options{TTL: ttl})
	if err != nil {
		return err
	}
	err = l.pool.BeginFunc(le.Context(), func(tx pgx.Tx) error {
		var n int64
		if err := tx.QueryRow(ctx, "SELECT n FROM lockq_example_counter").Scan(&n); err != nil {
			return err
		}
		tag, err := tx.Exec(ctx, "UPDATE lockq_example_counter SET n = $1 WHERE "+l.schema+
			".lockq_holds($2::text, $3::int8)", n+1, lockID, le.Token)
		if err == nil && tag.RowsAffected() != 1 {
			err = ErrLost // the fence refused the write: the lease had ended
		}
		return err
	})
	if rerr := le.Release(ctx); err == nil {
		err = rerr
	}
	return err
}
