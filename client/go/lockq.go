// Copyright (c) 2026, lockq developers
// This file is part of lockq, released under the PostgreSQL License
// (see LICENSE).

// Package lockq takes fair, leased, fenced locks of the lockq extension
// from Go, through a pgx v4 pool.
//
//	l, err := lockq.NewLocker(ctx, pool, nil)
//	err = l.Do(ctx, "reports:nightly", lockq.Options{TTL: 30 * time.Second},
//		func(ctx context.Context, lease *lockq.Lease) error {
//			// ctx ends when the lease is lost; fence writes with
//			// lockq.lockq_holds($1, $2) and lease.LockID, lease.Token
//			return nil
//		})
//
// The protocol is liblockq's (client/lockq_client.c): a wait is queued
// with lockq_enqueue naming the Locker's NOTIFY channel and kept alive
// with lockq_heartbeat every third of its heartbeat interval and on each
// notice (a notice is only a wake-up: the grant is what lockq_heartbeat
// returns), so no server backend is held while waiting; a wait that ends
// (its context, an error) leaves the queue with lockq_cancel, which also
// releases a grant that raced with it.  A held lease is renewed with
// lockq_renew every third of its ttl.  Its local deadline counts from when
// the request that set the lease was sent (time.Now carries the monotonic
// clock), so it never ends after the server's; a timer marks the lease
// lost there unless a renewal moved it, and a failed renewal or a "lost"
// notice that lockq_holds confirms marks it lost at once.  Lease.Context
// is cancelled then.
//
// Every statement is parameterised, calls the extension's functions
// qualified with their schema (looked up), sends durations as seconds
// through make_interval, and has a deadline (Config.IOTimeout; a wait's
// statements a third of the heartbeat interval): pgx closes a connection
// whose statement passes its deadline, so a stalled connection cannot
// hold a call past its bound.
//
// Durations are time.Duration everywhere.  The server must have lockq
// MinExtVersion or later.
package lockq

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgconn"
	"github.com/jackc/pgx/v4"
	"github.com/jackc/pgx/v4/pgxpool"
)

// MinExtVersion is the oldest lockq extension this package works with
// (the same as liblockq's, Python's and Node's).
const MinExtVersion = "1.1"

// ErrLost is returned when the lease ended before it was released.
var ErrLost = errors.New("lockq: the lease was lost")

// ErrNotAvailable is returned by Options.NoWait when the lock is taken or
// queued for.
var ErrNotAvailable = errors.New("lockq: the lock is not available")

// Defaults of Options and Config.
const (
	DefaultTTL       = 30 * time.Second
	DefaultHeartbeat = 10 * time.Second
	DefaultIOTimeout = 10 * time.Second
	withdrawTimeout  = time.Second // a withdrawal, the release of a lost lease
	retryDelay       = 200 * time.Millisecond
	reconnectDelay   = 500 * time.Millisecond // the listener's pause between attempts
)

// schemaQuery finds the schema of lockq's functions and the extension's
// version.
const schemaQuery = `SELECT n.nspname, e.extversion FROM pg_catalog.pg_extension e
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

// Config of a Locker.  Zero values mean the defaults.
type Config struct {
	// IOTimeout bounds each statement (default 10 s).
	IOTimeout time.Duration
	// Logf, if set, gets a line for each failed renewal, lost lease and
	// failed release (log.Printf will do).
	Logf func(format string, args ...interface{})
}

// Locker serves the leases of one pool: one listener connection, its
// channel, and the wake-up channels of the leases waiting or held.
type Locker struct {
	pool      *pgxpool.Pool
	schema    string // quoted
	channel   string
	ioTimeout time.Duration
	logf      func(format string, args ...interface{})
	stop      context.CancelFunc
	done      chan struct{}
	mu        sync.Mutex
	wake      map[[2]string]chan string // (lock id, owner) -> notice events
	sql       map[string]string
}

// CheckExtVersion returns an error unless installed is MinExtVersion or
// later.
func CheckExtVersion(installed string) error {
	if versionAtLeast(installed, MinExtVersion) {
		return nil
	}
	return fmt.Errorf("lockq extension %s is installed; this client needs %s or later: run ALTER EXTENSION lockq UPDATE",
		installed, MinExtVersion)
}

func versionAtLeast(v, min string) bool {
	parse := func(s string) (int, int, bool) {
		f := strings.SplitN(s, ".", 3)
		if len(f) < 2 {
			return 0, 0, false
		}
		a, err1 := strconv.Atoi(f[0])
		b, err2 := strconv.Atoi(f[1])
		return a, b, err1 == nil && err2 == nil
	}
	a, b, ok := parse(v)
	x, y, _ := parse(min)
	return ok && (a > x || (a == x && b >= y))
}

// NewLocker looks up lockq's schema, checks its version and starts
// listening on a connection of its own (opened with the pool's settings,
// outside its size).  cfg may be nil.
func NewLocker(ctx context.Context, pool *pgxpool.Pool, cfg *Config) (*Locker, error) {
	l := &Locker{pool: pool, channel: "lockq_" + randomHex(), ioTimeout: DefaultIOTimeout,
		wake: map[[2]string]chan string{}, done: make(chan struct{})}
	if cfg != nil {
		if cfg.IOTimeout > 0 {
			l.ioTimeout = cfg.IOTimeout
		}
		l.logf = cfg.Logf
	}
	var schema, version string
	qctx, cancel := context.WithTimeout(ctx, l.ioTimeout)
	err := pool.QueryRow(qctx, schemaQuery).Scan(&schema, &version)
	cancel()
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, errors.New("lockq: the lockq extension is not installed in this database")
	} else if err != nil {
		return nil, fmt.Errorf("lockq: looking up the extension: %w", err)
	}
	if err := CheckExtVersion(version); err != nil {
		return nil, err
	}
	l.schema = pgx.Identifier{schema}.Sanitize()
	l.sql = statements(l.schema)
	conn, err := l.openListener(ctx)
	if err != nil {
		return nil, err
	}
	lctx, stop := context.WithCancel(context.Background())
	l.stop = stop
	go l.listen(lctx, conn)
	return l, nil
}

// openListener connects with the pool's settings (outside its size) and
// LISTENs on the Locker's channel, within the I/O timeout.
func (l *Locker) openListener(ctx context.Context) (*pgx.Conn, error) {
	cctx, cancel := context.WithTimeout(ctx, l.ioTimeout)
	defer cancel()
	conn, err := pgx.ConnectConfig(cctx, l.pool.Config().ConnConfig.Copy())
	if err != nil {
		return nil, err
	}
	if _, err := conn.Exec(cctx, "LISTEN "+pgx.Identifier{l.channel}.Sanitize()); err != nil {
		conn.Close(context.Background())
		return nil, err
	}
	return conn, nil
}

func statements(schema string) map[string]string {
	s := func(f string, args ...interface{}) string {
		return "SELECT " + schema + "." + fmt.Sprintf(f, args...)
	}
	return map[string]string{
		"try":       s("lockq_try($1::text, $2::text, "+secs+")", "$3"),
		"enqueue":   s("lockq_enqueue($1::text, $2::text, "+secs+", $4::text, "+secs+")", "$3", "$5"),
		"heartbeat": s("lockq_heartbeat($1::text, $2::text)"),
		"cancel":    s("lockq_cancel($1::text, $2::text)"),
		"renew":     s("lockq_renew($1::text, $2::text, $3::int8, "+secs+")", "$4"),
		"holds":     s("lockq_holds($1::text, $2::int8)"),
		"release":   s("lockq_release($1::text, $2::text, $3::int8)"),
	}
}

// Schema is the schema of lockq's functions, quoted for use in SQL (for
// fenced statements: Schema() + ".lockq_holds($1, $2)").
func (l *Locker) Schema() string { return l.schema }

// Close stops listening; leases still held go on being renewed until
// released.
func (l *Locker) Close() {
	l.stop()
	<-l.done
}

func (l *Locker) log(format string, args ...interface{}) {
	if l.logf != nil {
		l.logf("lockq: "+format, args...)
	}
}

// listen hands each notice to its lease.  If the connection breaks, it
// connects again every reconnectDelay until it can LISTEN, and then wakes
// every wait, whose grant's notice may have been lost meanwhile (a wait
// learns of its grant from its heartbeat, which the wake-up sends at once;
// a lease learns of its loss from its renewals).
func (l *Locker) listen(ctx context.Context, conn *pgx.Conn) {
	defer close(l.done)
	for {
		n, err := conn.WaitForNotification(ctx)
		if err != nil {
			conn.Close(context.Background())
			if ctx.Err() != nil {
				return
			}
			l.log("the listener connection failed (%v): reconnecting", err)
			for conn = nil; conn == nil; {
				select {
				case <-ctx.Done():
					return
				case <-time.After(reconnectDelay):
				}
				conn, _ = l.openListener(ctx)
			}
			l.wakeAll("reconnected")
			continue
		}
		event, lockID, owner, ok := ParseNotice(n.Payload)
		if ok && n.Channel == l.channel {
			l.wakeOne([2]string{lockID, owner}, event)
		}
	}
}

// wakeOne hands event to the wait or lease of key, if there is one.
func (l *Locker) wakeOne(key [2]string, event string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if ch := l.wake[key]; ch != nil {
		nudge(ch, event)
	}
}

// wakeAll hands event to every wait and lease of the Locker.
func (l *Locker) wakeAll(event string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, ch := range l.wake {
		nudge(ch, event)
	}
}

// nudge sends event unless a wake-up is pending already: one is enough.
func nudge(ch chan string, event string) {
	select {
	case ch <- event:
	default:
	}
}

// ParseNotice reads a lockq NOTIFY payload, "<event> <token> <length>
// <lock id> <owner>"; the length counts bytes of the lock id, which may
// contain spaces.
func ParseNotice(payload string) (event, lockID, owner string, ok bool) {
	f := strings.SplitN(payload, " ", 4)
	if len(f) != 4 {
		return
	}
	n, err := strconv.Atoi(f[2])
	rest := f[3]
	if err != nil || n < 1 || n > 255 || len(rest) < n+2 || rest[n] != ' ' {
		return
	}
	return f[0], rest[:n], rest[n+1:], true
}

func randomHex() string {
	b := make([]byte, 8)
	if _, err := rand.Read(b); err != nil {
		panic(err) // the kernel's random source failed
	}
	return hex.EncodeToString(b)
}

func seconds(d time.Duration) string {
	return strconv.FormatFloat(d.Seconds(), 'f', -1, 64)
}

var leaseSeq uint64

// newOwner is unique per lease: host:pid:N:random, where N numbers the
// process's leases (the C, Python and Node clients put the thread there).
func newOwner() string {
	host, _ := os.Hostname()
	return fmt.Sprintf("%s:%d:%d:%s", host, os.Getpid(), atomic.AddUint64(&leaseSeq, 1), randomHex())
}

// Options of a lease.  Zero values mean the defaults.
type Options struct {
	TTL         time.Duration // lease (default 30 s), renewed every TTL/3
	Heartbeat   time.Duration // the wait's liveness bound on the server (default 10 s)
	NoWait      bool          // lockq_try: ErrNotAvailable instead of waiting
	Owner       string        // default: a fresh owner per lease
	ManualRenew bool          // no renewals: the lease ends at TTL unless Extend is called
}

// Lease is a held lock.  Token is the fencing token.  Context() is
// cancelled when the lease is lost, released or forgotten.
type Lease struct {
	Token    int64
	LockID   string
	Owner    string
	l        *Locker
	ttl      time.Duration
	ctx      context.Context
	cancel   context.CancelFunc
	wake     chan string
	mu       sync.Mutex
	deadline time.Time   // the local lease end
	timer    *time.Timer // fires at deadline
	lost     bool
}

// query runs one statement with a deadline of bound.
func (l *Locker) query(ctx context.Context, bound time.Duration, stmt string, dest interface{}, args ...interface{}) error {
	qctx, cancel := context.WithTimeout(ctx, bound)
	defer cancel()
	return l.pool.QueryRow(qctx, l.sql[stmt], args...).Scan(dest)
}

// queryRetrying is query for the statements that end something (release,
// withdrawal): a pooled connection that fails (dead after a switchover or
// a terminated backend, and not yet dropped by the pool) is followed by
// another, until bound; the statements are idempotent for their owner.
func (l *Locker) queryRetrying(ctx context.Context, bound time.Duration, stmt string, dest interface{}, args ...interface{}) error {
	end := time.Now().Add(bound)
	for {
		err := l.query(ctx, time.Until(end), stmt, dest, args...)
		if err == nil || !broken(err) || ctx.Err() != nil || time.Until(end) <= retryDelay {
			return err
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(retryDelay):
		}
	}
}

// broken tells a failed connection (an error of the connection, a
// statement past its deadline, or a server error of class 08, connection
// exception, or 57P, the server ending the session as in a switchover)
// from an error the server raised for the statement itself.
func broken(err error) bool {
	code := sqlstate(err)
	return code == "" || strings.HasPrefix(code, "08") || strings.HasPrefix(code, "57P")
}

// sqlstate is the SQLSTATE of an error the server raised, "" for any
// other error.
func sqlstate(err error) string {
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) {
		return pgErr.Code
	}
	return ""
}

// Lock waits in FIFO order until the lock is granted or ctx ends (then the
// wait leaves the queue, a grant that raced with it is released, and
// ctx's error is returned).  With Options.NoWait it does not wait.
func (l *Locker) Lock(ctx context.Context, lockID string, o Options) (*Lease, error) {
	if o.TTL <= 0 {
		o.TTL = DefaultTTL
	}
	if o.Heartbeat <= 0 {
		o.Heartbeat = DefaultHeartbeat
	}
	if o.Owner == "" {
		o.Owner = newOwner()
	}
	le := &Lease{LockID: lockID, Owner: o.Owner, l: l, ttl: o.TTL, wake: make(chan string, 1)}
	key := [2]string{lockID, le.Owner}
	l.mu.Lock()
	if l.wake[key] != nil {
		l.mu.Unlock()
		return nil, fmt.Errorf("lockq: owner %q already waits for or holds %q through this Locker", le.Owner, lockID)
	}
	l.wake[key] = le.wake
	l.mu.Unlock()

	sent := time.Now()
	var token *int64
	var err error
	if o.NoWait {
		err = l.query(ctx, l.ioTimeout, "try", &token, lockID, le.Owner, seconds(o.TTL))
		if err == nil && token == nil {
			err = ErrNotAvailable
		}
	} else {
		token, sent, err = le.wait(ctx, o)
	}
	if err != nil {
		l.forget(key)
		return nil, err
	}
	le.Token = *token
	le.deadline = sent.Add(o.TTL)
	le.ctx, le.cancel = context.WithCancel(context.Background())
	le.timer = time.AfterFunc(time.Until(le.deadline), le.expire)
	go le.keep(sent, !o.ManualRenew)
	return le, nil
}

// Do takes the lock, runs fn with a context that ends when the lease is
// lost, and releases it.  It returns fn's error; else ErrLost if the
// lease was lost meanwhile, or the release's error.
func (l *Locker) Do(ctx context.Context, lockID string, o Options, fn func(context.Context, *Lease) error) error {
	le, err := l.Lock(ctx, lockID, o)
	if err != nil {
		return err
	}
	ferr := fn(le.Context(), le)
	rerr := le.Release(context.Background())
	if ferr != nil {
		return ferr
	}
	return rerr
}

func (l *Locker) forget(key [2]string) {
	l.mu.Lock()
	delete(l.wake, key)
	l.mu.Unlock()
}

// wait queues and heartbeats until granted.  A statement that failed on
// its connection (broken) is tried again on another (the server keeps the
// place) until the server has been unreachable for the heartbeat
// interval; when ctx ends or it gives up, it withdraws.
func (le *Lease) wait(ctx context.Context, o Options) (*int64, time.Time, error) {
	l := le.l
	bound := o.Heartbeat / 3
	var token *int64
	sent := time.Now()
	reached := sent
	err := l.query(ctx, bound, "enqueue", &token, le.LockID, le.Owner, seconds(o.TTL), l.channel, seconds(o.Heartbeat))
	for (err == nil && token == nil) || (err != nil && ctx.Err() == nil && time.Since(reached) < o.Heartbeat) {
		stmt := "heartbeat"
		if err == nil {
			reached = sent
			select {
			case <-ctx.Done():
				err = ctx.Err()
				continue
			case <-le.wake:
			case <-time.After(time.Until(sent.Add(o.Heartbeat / 3))):
			}
		} else if !broken(err) {
			if sqlstate(err) != "55000" { // not "dropped": a real error
				break
			}
			stmt = "enqueue" // dropped: queue again
		} else {
			select { // unreachable, or its connection died: try again soon
			case <-ctx.Done():
				err = ctx.Err()
				continue
			case <-time.After(retryDelay):
			}
		}
		sent = time.Now()
		if stmt == "enqueue" {
			err = l.query(ctx, bound, stmt, &token, le.LockID, le.Owner, seconds(o.TTL), l.channel, seconds(o.Heartbeat))
		} else {
			err = l.query(ctx, bound, stmt, &token, le.LockID, le.Owner)
		}
	}
	if err != nil {
		if ctx.Err() != nil {
			err = ctx.Err()
		}
		var ok bool
		if werr := l.queryRetrying(context.Background(), withdrawTimeout, "cancel", &ok, le.LockID, le.Owner); werr != nil {
			l.log("withdrawing the wait for %q failed (%v): the server drops it within %v", le.LockID, werr, o.Heartbeat)
		}
	}
	return token, sent, err
}

// Context is cancelled when the lease is lost, released or forgotten.
func (le *Lease) Context() context.Context { return le.ctx }

// keep renews every ttl/3 (if renew) and checks "lost" notices with
// lockq_holds.  A renewal that fails is tried again soon; the timer at
// the local lease end declares the lease lost if none succeeds in time.
func (le *Lease) keep(sent time.Time, renew bool) {
	l := le.l
	next := sent.Add(le.ttl / 3)
	for {
		var tick <-chan time.Time
		if renew {
			tick = time.After(time.Until(next))
		}
		select {
		case <-le.ctx.Done(): // lost, released or forgotten
			return
		case event := <-le.wake:
			var ok bool
			if event == "lost" && l.query(le.ctx, l.ioTimeout, "holds", &ok, le.LockID, le.Token) == nil && !ok {
				le.lose("a lost notice, confirmed")
				return
			}
		case <-tick:
			switch err := le.Extend(le.ctx, le.TTL()); {
			case errors.Is(err, ErrLost):
				return
			case err != nil:
				if le.ctx.Err() == nil {
					l.log("renewing %q (token %d) failed: %v; trying again", le.LockID, le.Token, err)
				}
				next = time.Now().Add(time.Second)
			default:
				next = time.Now().Add(le.TTL() / 3)
			}
		}
	}
}

// TTL is the lease's current ttl (the last Extend's).
func (le *Lease) TTL() time.Duration {
	le.mu.Lock()
	defer le.mu.Unlock()
	return le.ttl
}

// Extend renews the lease now for ttl from when the request is sent (and
// makes ttl the lease's ttl for its later renewals).  ErrLost if the
// server no longer has the grant; another error if it did not answer
// within the I/O timeout or the lease's local deadline (the lease may
// still be held then).
func (le *Lease) Extend(ctx context.Context, ttl time.Duration) error {
	if ttl <= 0 {
		return errors.New("lockq: ttl must be positive")
	}
	if !le.Held() {
		return ErrLost
	}
	bound := le.l.ioTimeout
	if r := le.Remaining(); r < bound {
		bound = r
	}
	var ok bool
	sent := time.Now()
	if err := le.l.query(ctx, bound, "renew", &ok, le.LockID, le.Owner, le.Token, seconds(ttl)); err != nil {
		return err
	}
	if !ok {
		le.lose("the server refused a renewal")
		return ErrLost
	}
	le.mu.Lock()
	defer le.mu.Unlock()
	if le.lost || !time.Now().Before(le.deadline) {
		return ErrLost
	}
	le.ttl = ttl
	le.deadline = sent.Add(ttl)
	le.timer.Reset(time.Until(le.deadline))
	return nil
}

// expire runs at the local deadline: lost, unless a renewal moved it.
func (le *Lease) expire() {
	le.mu.Lock()
	due := !time.Now().Before(le.deadline)
	le.mu.Unlock()
	if due {
		le.lose("no renewal confirmed before its local deadline")
	}
}

func (le *Lease) lose(why string) {
	le.mu.Lock()
	first := !le.lost && le.ctx.Err() == nil
	le.lost = true
	le.mu.Unlock()
	le.cancel()
	if first {
		le.l.log("lease of %q (token %d) lost: %s", le.LockID, le.Token, why)
	}
}

// Held reports whether the lease is still valid: not lost, released or
// forgotten, and its local deadline not passed (checked on the clock,
// whether or not the timer has run).
func (le *Lease) Held() bool {
	le.mu.Lock()
	defer le.mu.Unlock()
	return !le.lost && le.ctx.Err() == nil && time.Now().Before(le.deadline)
}

// Remaining is the time left until the lease's local deadline; 0 once it
// is not held.
func (le *Lease) Remaining() time.Duration {
	if !le.Held() {
		return 0
	}
	le.mu.Lock()
	defer le.mu.Unlock()
	if r := time.Until(le.deadline); r > 0 {
		return r
	}
	return 0
}

// Forget stops renewing and watching the lease without releasing it: the
// grant stays on the server until its lease ends or its owner releases it
// (for handing a lock over to another process under the same owner).
func (le *Lease) Forget() {
	le.timer.Stop()
	le.cancel()
	le.l.forget([2]string{le.LockID, le.Owner})
}

// Release releases the lock: ErrLost if the lease had been lost (the
// release is still sent, bounded by a second, in case the server has it).
func (le *Lease) Release(ctx context.Context) error {
	held := le.Held()
	le.Forget()
	bound := le.l.ioTimeout
	if !held {
		bound = withdrawTimeout
	}
	var ok bool
	if err := le.l.queryRetrying(ctx, bound, "release", &ok, le.LockID, le.Owner, le.Token); err != nil {
		le.l.log("releasing %q (token %d) failed: %v; the lease ends by itself", le.LockID, le.Token, err)
		if !held {
			return ErrLost
		}
		return err
	}
	if !ok || !held {
		return ErrLost
	}
	return nil
}
