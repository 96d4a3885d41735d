package dispatcher

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"time"

	"github.com/cenkalti/backoff/v4"
	"go.uber.org/zap"

	"github.com/outboxd/outboxd/internal/clock"
	"github.com/outboxd/outboxd/internal/failpolicy"
	"github.com/outboxd/outboxd/internal/fault"
	"github.com/outboxd/outboxd/internal/leader"
	"github.com/outboxd/outboxd/internal/maintenance"
	"github.com/outboxd/outboxd/store"
)

// errPositionUnreadable marks a saved position the store cannot read.
var errPositionUnreadable = errors.New("the saved feed position cannot be read")

// lead relays while this dispatcher holds lease: it opens the feed, catches
// up from the outbox and relays what the feed delivers, and opens it again
// after a lost position, the feed's end or a failure. It returns when ctx
// ends, on a fenced write and on a fault point.
func (d *Dispatcher) lead(ctx, workCtx context.Context, lease store.Lease) error {
	defer d.unled()
	// The maintenance services (maintenance.go) run while this lead does;
	// they stop before unled clears the relay's figures.
	defer maintenance.StartAll(ctx, d.services()...)()
	bo := &failpolicy.HaltBackOff{Inner: d.newBackoff(), Streak: d.streak, Probe: d.cfg.BreakerTimeout}
	var lost error // why the previous feed cannot be resumed
	for {
		err := d.follow(ctx, workCtx, lease, lost)
		lost = nil
		switch {
		case errors.Is(err, fault.ErrInjected):
			return leader.Abort(err)
		case ctx.Err() != nil, errors.Is(err, store.ErrFenced):
			return err
		case errors.Is(err, store.ErrPositionLost), errors.Is(err, store.ErrFeedInvalidated):
			lost = err // reopen from now at once: waiting does not bring it back
		default:
			f := failpolicy.StoreFailure(err)
			d.streak.Fail(f)
			bo.Class = f.Class
			wait := bo.NextBackOff()
			d.logger.Warn("relaying failed; reopening the feed", zap.String("code", f.Code), zap.Duration("wait", wait), zap.Error(err))
			if err := clock.Sleep(ctx, wait); err != nil {
				return err
			}
		}
	}
}

// unled clears what this dispatcher knew and exported as the leader, once
// it stops leading: a standby holds nothing, reads neither Redis's memory
// nor the groups' lag, retries nothing and calls nothing through its
// breaker, and figures left from its lead (outboxd_dispatcher_backpressure,
// Redis's memory, outboxd_stream_lag, outboxd_retries_halted,
// outboxd_error_streak, outboxd_dispatcher_breaker_state) would keep
// /v1/status and the alerts on them (OutboxdRedisMemoryHigh,
// OutboxdStreamLagHigh, OutboxdRetriesHalted, OutboxdDispatcherBreakerOpen)
// saying what only the new leader can tell. Its next lead starts with a
// closed breaker, as a dispatcher that takes over does.
func (d *Dispatcher) unled() {
	d.unwatched()
	d.streak.Forget()
	d.publisher = d.newPublisher()
}

// follow is one feed's life: open it (from the saved position unless lost
// says it is gone), catch up from the outbox when the feed cannot deliver
// what is undispatched (catchUpNeeded), then relay what it delivers. The
// feed opens before the catch-up reads the outbox, so an entry committed
// meanwhile is in one or both (relayed once: seen).
func (d *Dispatcher) follow(ctx, workCtx context.Context, lease store.Lease, lost error) error {
	var from store.Position
	if lost == nil {
		st, err := d.st.ReadLease(ctx, lease.Name)
		if err != nil {
			return err
		}
		if st != nil {
			from = st.Position
			if st.PositionInvalid {
				lost = errPositionUnreadable
			}
		}
	}
	opts := store.FeedOptions{PollInterval: d.cfg.PollInterval, Gather: max(0, d.cfg.FeedGather), Partition: d.cfg.part}
	feed, err := d.st.OpenFeed(ctx, d.cfg.Stream, from, opts)
	if errors.Is(err, store.ErrPositionLost) && from != nil {
		lost = err
		feed, err = d.st.OpenFeed(ctx, d.cfg.Stream, nil, opts)
	}
	if err != nil {
		return err
	}
	defer feed.Close(context.WithoutCancel(ctx))
	if lost != nil {
		d.countLost(lost)
		// Forget the dead position at once, so that a failure during the
		// catch-up does not find it, and count it, again. Starting from
		// now is safe: a lost position is caught up from the outbox.
		if err := d.checkpoint(workCtx, lease, nil, true); err != nil {
			return err
		}
	}
	// Every relay loop below waits for its marks before it returns.
	m := newMarks(func(ctx context.Context, ids []string, pos store.Position, batches int) error {
		return d.mark(ctx, lease, ids, pos, batches)
	}, d.cfg.MarkInterval, d.cfg.BatchSize)
	var n int
	seen := map[string]struct{}{}
	if catchUpNeeded(from, lost) {
		if n, seen, err = d.catchUp(ctx, workCtx, lease, m, time.Time{}); err != nil {
			return err
		}
	}
	switch {
	case lost != nil:
		d.logger.Warn("feed position lost; caught up from the outbox and reopened from now",
			zap.Int64("history_lost_total", d.historyLost.Load()), zap.Int64("invalidated_total", d.invalidated.Load()),
			zap.Int("caught_up", n), zap.NamedError("cause", lost))
	case n > 0:
		d.logger.Info("caught up from the outbox", zap.Int("caught_up", n))
	}
	if err := d.checkpoint(workCtx, lease, feed.Position(), false); err != nil {
		return err
	}
	return d.relayFeed(ctx, workCtx, lease, m, feed, seen)
}

// catchUpNeeded tells whether a feed opened from from (nil: from now) needs
// a catch-up from the outbox first. A feed the store resumed from a saved
// position delivers every entry committed after it, in commit order (a
// change stream from its resume token, the outbox sequence on SQLite); the
// entries before it were marked dispatched with the checkpoint, and those
// the feed could not deliver (an oplog hole, an undecodable event) are the
// sweep's. A catch-up reads the outbox in entry id order, which on MongoDB
// is ObjectID order: within one second, entries of two writer processes
// sort by their processes' random bytes, not by commit, so relaying it
// before a resumed feed would break each device's write order under
// --ordered on every lead start. It runs only when the feed cannot deliver
// what is undispatched: no saved position (a first start, a forgotten
// one) or a lost one (lost).
func catchUpNeeded(from store.Position, lost error) bool {
	return from == nil || lost != nil
}

func (d *Dispatcher) countLost(cause error) {
	if errors.Is(cause, store.ErrFeedInvalidated) {
		d.invalidated.Add(1)
		d.metrics.invalidated.Inc()
		return
	}
	d.historyLost.Add(1)
	d.metrics.historyLost.Inc()
}

// catchUp relays every undispatched entry of the stream created before
// olderThan (zero: all), oldest first, and returns how many it relayed and
// their ids. After a full page it reads the next one while it relays this
// one (ahead), the store writes a page while the next is added to the
// stream (m), and it returns when every write is done.
func (d *Dispatcher) catchUp(ctx, workCtx context.Context, lease store.Lease, m *marks, olderThan time.Time) (_ int, _ map[string]struct{}, err error) {
	// The writes of earlier batches end before the outbox is read: an entry
	// in the stream whose write is still in flight reads as undispatched,
	// and would be relayed twice.
	if err := m.wait(); err != nil {
		return 0, nil, err
	}
	defer m.waitInto(&err)
	page := func(after string) func(context.Context) batchRead {
		return func(ctx context.Context) batchRead {
			entries, err := d.st.Undispatched(ctx, d.cfg.Stream, d.cfg.part, after, d.cfg.BatchSize)
			return batchRead{entries: entries, err: err}
		}
	}
	// Pages follow each other by id (after), never by dispatchedAt, so the
	// next page's read does not depend on this one's write.
	next := readAhead(ctx, page(""))
	defer func() { next.abandon() }()
	seen := map[string]struct{}{}
	n := 0
	for {
		got := next.take()
		next = nil
		entries := got.entries
		if got.err != nil {
			return n, nil, fmt.Errorf("error reading undispatched outbox entries: %w", got.err)
		}
		full := len(entries) == d.cfg.BatchSize
		if !olderThan.IsZero() {
			young := len(entries)
			for i, e := range entries {
				if !e.CreatedAt.Before(olderThan) {
					young = i
					break
				}
			}
			full = full && young == len(entries)
			entries = entries[:young]
		}
		if len(entries) == 0 {
			return n, seen, nil
		}
		if full {
			next = readAhead(ctx, page(entries[len(entries)-1].ID))
		}
		if err := d.relay(ctx, workCtx, m, entries, nil); err != nil {
			return n, nil, err
		}
		for _, e := range entries {
			seen[e.ID] = struct{}{}
		}
		n += len(entries)
		d.caughtUp.Add(int64(len(entries)))
		if !full {
			return n, seen, nil
		}
	}
}

// relayFeed relays what the feed delivers, in batches, checkpoints while
// idle, and every SweepInterval relays old undispatched entries the feed
// missed, until ctx ends or something fails. The store writes a batch while the next one is read
// and added to the stream (m); it returns when every write is done.
func (d *Dispatcher) relayFeed(ctx, workCtx context.Context, lease store.Lease, m *marks, feed store.Feed, seen map[string]struct{}) (err error) {
	defer m.waitInto(&err)
	// next reads the feed's next batch while this one is relayed; only
	// after a full batch (the feed is behind): the sweep and the idle
	// checkpoint, which follow a batch that was not full, never run beside
	// a read.
	var next *batchReading
	defer func() { next.abandon() }()
	read := func(ctx context.Context) batchRead {
		entries, err := feed.Next(ctx, d.cfg.BatchSize, d.cfg.IdleCheckpoint)
		// The position is read before the next Next moves it: the batch's
		// checkpoint covers the batch and nothing after it.
		return batchRead{entries: entries, pos: feed.Position(), err: err}
	}
	lastCheckpoint := time.Now()
	moved := false // the feed delivered entries after the last checkpoint, relayed by a catch-up or a sweep
	nextSweep := time.Now().Add(d.cfg.SweepInterval)
	for {
		if err := ctx.Err(); err != nil {
			return err
		}
		var got batchRead
		if next != nil {
			got = next.take()
			next = nil
		} else {
			got = read(ctx)
		}
		entries, err := got.entries, got.err
		if err != nil {
			if ctx.Err() != nil {
				return ctx.Err()
			}
			return err
		}
		if len(entries) == d.cfg.BatchSize {
			next = readAhead(ctx, read)
		}
		batch := entries[:0]
		for _, e := range entries {
			if _, dup := seen[e.ID]; dup {
				delete(seen, e.ID)
				continue
			}
			batch = append(batch, e)
		}
		switch {
		case len(batch) > 0:
			if err := d.relay(ctx, workCtx, m, batch, got.pos); err != nil {
				return err
			}
			lastCheckpoint, moved = time.Now(), false
		case len(entries) > 0:
			moved = true // all seen: the checkpoint moves past them when the feed is quiet
		case len(entries) == 0:
			// The feed is quiet, so it has delivered what the catch-up
			// also relayed: nothing left to skip.
			clear(seen)
			if idleCheckpointDue(time.Since(lastCheckpoint), moved, d.cfg) {
				// After the batches' own checkpoints, never before one.
				if err := m.wait(); err != nil {
					return err
				}
				if err := d.checkpoint(workCtx, lease, feed.Position(), false); err != nil {
					return err
				}
				lastCheckpoint, moved = time.Now(), false
			}
		}
		// While the feed delivers full batches it is behind, and what it
		// has not delivered yet is not missed: the sweep waits.
		if len(entries) < d.cfg.BatchSize && time.Now().After(nextSweep) {
			swept, err := d.sweep(ctx, workCtx, lease, m)
			if err != nil {
				return err
			}
			maps.Copy(seen, swept) // the feed may still deliver them
			nextSweep = time.Now().Add(d.cfg.SweepInterval)
		}
	}
}

// idleCheckpointDue tells whether a quiet feed's checkpoint is due, since
// after the last one: IdleCheckpoint after the feed delivered entries that
// were relayed already (moved: the checkpoint covers none of them yet),
// else every IdleCheckpointMax, which keeps the position in the store's
// history (on MongoDB a change stream's post-batch token moves with every
// write to the deployment, its lease renewals included, so "the position
// changed" would be every time).
func idleCheckpointDue(since time.Duration, moved bool, cfg *Config) bool {
	if moved {
		return since >= cfg.IdleCheckpoint
	}
	return since >= max(cfg.IdleCheckpoint, cfg.IdleCheckpointMax)
}

// sweep relays the undispatched entries older than SweepMinAge (the feed
// should have delivered them: a commit that became visible behind the
// feed's start, an undecodable change event) and returns the ids it
// relayed. (The retentions are a service of their own: maintenance.go.)
func (d *Dispatcher) sweep(ctx, workCtx context.Context, lease store.Lease, m *marks) (map[string]struct{}, error) {
	n, seen, err := d.catchUp(ctx, workCtx, lease, m, d.cfg.Now().Add(-d.cfg.SweepMinAge))
	if err != nil {
		return nil, err
	}
	if n > 0 {
		d.metrics.swept.Add(float64(n))
		d.logger.Warn("relayed undispatched entries the feed did not deliver", zap.Int("entries", n))
	}
	return seen, nil
}

func (d *Dispatcher) newBackoff() *backoff.ExponentialBackOff {
	return backoff.NewExponentialBackOff(backoff.WithInitialInterval(min(100*time.Millisecond, d.cfg.BackoffMax)),
		backoff.WithMaxInterval(d.cfg.BackoffMax), backoff.WithMaxElapsedTime(0))
}
