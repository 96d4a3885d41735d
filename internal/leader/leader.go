// Package leader runs work on one process at a time: an Elector holds a
// lease of the store (store.Store's lease operations, with a fencing term),
// renews it every third of its TTL, and runs the leader's work only while
// it holds it. The dispatcher relays on its stream's lease; the periodic
// reconciler sweeps on its own ("reconciler:<stream>"), so every replica
// can run both and each job runs once (river's internal/leadership serves
// its maintenance services the same way).
package leader

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/cenkalti/backoff/v4"
	"go.uber.org/zap"

	"github.com/outboxd/outboxd/internal/clock"
	"github.com/outboxd/outboxd/store"
)

// Leases are the store operations an Elector needs.
type Leases interface {
	AcquireLease(ctx context.Context, name, owner string, now time.Time, ttl time.Duration) (store.Lease, error)
	RenewLease(ctx context.Context, lease store.Lease, now time.Time, ttl time.Duration) (store.Lease, error)
	ReleaseLease(ctx context.Context, lease store.Lease) (bool, error)
}

// ErrLost ends a leadership: the lease was taken over (fenced) or could not
// be renewed before it expired. The cause is wrapped.
var ErrLost = errors.New("lost the lease")

// abortError marks an error after which the elector stops at once.
type abortError struct{ err error }

func (e abortError) Error() string { return e.err.Error() }
func (e abortError) Unwrap() error { return e.err }

// Abort wraps err so that Run returns it at once, as a crash would: no
// release of the lease, no further write.
func Abort(err error) error { return abortError{err} }

// Hooks observe an Elector. Any may be nil.
type Hooks struct {
	// Elected runs when the lease is taken.
	Elected func(lease store.Lease)
	// Demoted runs when a leadership ends, with why (nil on a stop).
	Demoted func(lease store.Lease, cause error)
}

// Elector takes and keeps one lease. Create it with New.
type Elector struct {
	leases     Leases
	name       string
	owner      string
	ttl        time.Duration
	now        func() time.Time
	backoffMax time.Duration
	hooks      Hooks
	gate       func() bool
	logger     *zap.Logger
}

// Config configures an Elector.
type Config struct {
	// Name is the lease's name; Owner this process's name in it.
	Name, Owner string
	// TTL is how long the lease lasts unrenewed: how long a standby waits
	// after the leader died.
	TTL time.Duration
	// Now tells the time for expiries. Defaults to time.Now.
	Now func() time.Time
	// BackoffMax caps the pause after a failed leadership. Defaults to
	// 5 seconds.
	BackoffMax time.Duration
	Hooks      Hooks
	// Gate, when set, is asked before each attempt to take the lease; while
	// it says no the Elector stands by without asking the store (the
	// dispatcher's fair share of partitions).
	Gate func() bool
}

// New returns an Elector for cfg.
func New(leases Leases, cfg Config, logger *zap.Logger) *Elector {
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	if cfg.BackoffMax <= 0 {
		cfg.BackoffMax = 5 * time.Second
	}
	if logger == nil {
		logger = zap.NewNop()
	}
	return &Elector{leases: leases, name: cfg.Name, owner: cfg.Owner, ttl: cfg.TTL, now: cfg.Now,
		backoffMax: cfg.BackoffMax, hooks: cfg.Hooks, gate: cfg.Gate, logger: logger.With(zap.String("lease", cfg.Name))}
}

// Interval is how often the lease is renewed and standbys look at it.
func (e *Elector) Interval() time.Duration { return e.ttl / 3 }

// Run alternates between standby and leadership until ctx ends. While it
// holds the lease it calls lead with a context that ends when the lease is
// lost (context.Cause wraps ErrLost) or ctx ends; lead returns why it
// stopped. After an error of lead, Run backs off and tries again; after an
// error wrapped by Abort, it returns that error at once. When ctx ends it
// releases the lease (on releaseCtx, which should outlive ctx) and returns
// nil.
func (e *Elector) Run(ctx, releaseCtx context.Context, lead func(ctx context.Context, lease store.Lease) error) error {
	bo := backoff.NewExponentialBackOff(backoff.WithInitialInterval(min(100*time.Millisecond, e.backoffMax)),
		backoff.WithMaxInterval(e.backoffMax), backoff.WithMaxElapsedTime(0))
	standby := false
	for ctx.Err() == nil {
		if e.gate != nil && !e.gate() {
			_ = clock.Sleep(ctx, e.Interval())
			continue
		}
		lease, err := e.leases.AcquireLease(ctx, e.name, e.owner, e.now(), e.ttl)
		switch {
		case err != nil:
			if ctx.Err() == nil {
				e.logger.Warn("error taking the lease; retrying", zap.Error(err))
				_ = clock.Sleep(ctx, bo.NextBackOff())
			}
			continue
		case !lease.Held():
			if !standby {
				e.logger.Info("standing by: another process holds the lease")
				standby = true
			}
			_ = clock.Sleep(ctx, e.Interval())
			continue
		}
		standby = false
		began := time.Now()
		err = e.hold(ctx, lease, lead)
		var abort abortError
		switch {
		case errors.As(err, &abort):
			e.demoted(lease, err)
			return abort.err
		case ctx.Err() != nil:
			e.release(releaseCtx, lease)
			e.demoted(lease, nil)
			return nil
		case errors.Is(err, ErrLost):
			e.demoted(lease, err)
			e.logger.Warn("lost the lease; standing by", zap.Int64("term", lease.Term), zap.Error(err))
			_ = clock.Sleep(ctx, e.Interval())
		default:
			e.demoted(lease, err)
			e.logger.Error("leader failed; retrying", zap.Int64("term", lease.Term), zap.Error(err))
			if time.Since(began) > e.ttl {
				bo.Reset()
			}
			_ = clock.Sleep(ctx, bo.NextBackOff())
		}
	}
	return nil
}

// hold runs lead while renewing lease; it returns lead's error, or the
// cause of a lost lease when that ended the leadership.
func (e *Elector) hold(ctx context.Context, lease store.Lease, lead func(context.Context, store.Lease) error) error {
	e.logger.Info("took the lease", zap.Int64("term", lease.Term))
	if e.hooks.Elected != nil {
		e.hooks.Elected(lease)
	}
	leadCtx, cancel := context.WithCancelCause(ctx)
	done := make(chan struct{})
	go func() {
		defer close(done)
		e.keep(leadCtx, lease, cancel)
	}()
	err := lead(leadCtx, lease)
	cause := context.Cause(leadCtx)
	cancel(nil)
	<-done
	var abort abortError
	switch {
	case errors.As(err, &abort):
		return err
	case ctx.Err() == nil && errors.Is(cause, ErrLost):
		return cause
	case errors.Is(err, store.ErrFenced):
		// A fenced write of the leader: another owner or a newer term.
		return fmt.Errorf("%w: %w", ErrLost, err)
	}
	return err
}

// keep renews the lease every Interval until ctx ends; when the lease was
// taken over, or ran out before a renewal succeeded, it cancels ctx with
// the reason. Each renewal must finish before the lease would expire.
func (e *Elector) keep(ctx context.Context, lease store.Lease, cancel context.CancelCauseFunc) {
	ticker := time.NewTicker(e.Interval())
	defer ticker.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-ticker.C:
		}
		left := lease.Expires.Sub(e.now())
		if left <= 0 {
			cancel(fmt.Errorf("%w: it expired before it could be renewed", ErrLost))
			return
		}
		// The renewal must finish while the lease still holds: a renewal
		// stuck behind an unreachable majority must not outlive it.
		rctx, rcancel := context.WithTimeout(ctx, left)
		renewed, err := e.leases.RenewLease(rctx, lease, e.now(), e.ttl)
		rcancel()
		switch {
		case err == nil:
			lease = renewed
		case errors.Is(err, store.ErrFenced):
			cancel(fmt.Errorf("%w: %w", ErrLost, err))
			return
		case ctx.Err() != nil:
			return
		default:
			e.logger.Warn("error renewing the lease", zap.Int64("term", lease.Term), zap.Error(err))
			if !e.now().Before(lease.Expires) {
				cancel(fmt.Errorf("%w: it expired before it could be renewed: %w", ErrLost, err))
				return
			}
		}
	}
}

func (e *Elector) release(ctx context.Context, lease store.Lease) {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	ok, err := e.leases.ReleaseLease(ctx, lease)
	switch {
	case err != nil:
		e.logger.Warn("error releasing the lease; a standby takes over when it expires", zap.Int64("term", lease.Term), zap.Error(err))
	case !ok:
		e.logger.Info("lease already taken over", zap.Int64("term", lease.Term))
	default:
		e.logger.Info("released the lease", zap.Int64("term", lease.Term))
	}
}

func (e *Elector) demoted(lease store.Lease, cause error) {
	if e.hooks.Demoted != nil {
		e.hooks.Demoted(lease, cause)
	}
}
