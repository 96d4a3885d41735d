package worker

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/cenkalti/backoff/v4"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/sony/gobreaker/v2"
	"go.uber.org/zap"

	"github.com/outboxd/outboxd/internal/failpolicy"
	"github.com/outboxd/outboxd/internal/startstop"
	"github.com/outboxd/outboxd/store"
	"github.com/outboxd/outboxd/stream"
)

// Fault points (tests only). When one fires the worker stops at once, as if
// its process had crashed: nothing more is written and nothing acknowledged.
const (
	// FaultAfterCommit fires after the PostgreSQL commit, before syncedAt.
	FaultAfterCommit = "worker.after-commit"
	// FaultAfterSyncedAt fires after syncedAt is set, before XACK.
	FaultAfterSyncedAt = "worker.after-synced"
)

// ErrRecord is wrapped by errors that are the record's own fault and will
// not go away by retrying (the default projector's invalid payload, or a
// custom Projector saying "do not retry"). Such records are parked as poison
// after Config.MaxDeliveries deliveries.
var ErrRecord = errors.New("record cannot be projected")

// Worker consumes a stream through a consumer group and projects each
// entry's original into PostgreSQL, then sets its syncedAt and acknowledges
// the entry. Any number of Workers (in one process or many) may share a
// group.
//
// Its lifecycle is package startstop's: Start checks that Redis,
// PostgreSQL and the store answer, creates the consumer group (and the
// stream) when missing and consumes in the background; Stop stops reading
// and waits until the batch in flight is projected, marked and
// acknowledged, or abandons it when its context ends first (the entries
// stay pending and are reclaimed later); Err reports a fault point that
// stopped it abruptly.
type Worker struct {
	life startstop.Base

	st           store.Store
	rc           *stream.Client
	group        *stream.Group
	pool         *pgxpool.Pool
	cfg          *Config
	logger       *zap.Logger
	metrics      *metrics
	pgBreaker    *gobreaker.CircuitBreaker[struct{}]
	storeBreaker *gobreaker.CircuitBreaker[struct{}]
	streak       *failpolicy.Streak

	// held are the entries this worker keeps pending for a later delivery,
	// by entry id; only the run goroutine touches it.
	held map[string]heldEntry
	// ahead delivers the batch a read-ahead is reading, or is nil; only the
	// run goroutine touches it.
	ahead chan aheadBatch
	// wake tells the run goroutine that ResumeRetries was called.
	wake chan struct{}
	// beat is when the run goroutine last showed a sign of life (Unix
	// nanoseconds).
	beat atomic.Int64
}

// heldEntry is an entry kept pending until due.
type heldEntry struct {
	msg stream.Entry
	due time.Time
}

// New returns a Worker reading cfg.Stream as cfg.Group through rc. A nil
// cfg means all defaults. It does not touch the stores; Start does.
func New(st store.Store, rc *stream.Client, pool *pgxpool.Pool, cfg *Config, logger *zap.Logger) (*Worker, error) {
	if st == nil || rc == nil || pool == nil {
		return nil, errors.New("worker: a store, a Redis client and a PostgreSQL pool are required")
	}
	c := cfg.withDefaults()
	if err := c.validate(); err != nil {
		return nil, fmt.Errorf("invalid worker config: %w", err)
	}
	if logger == nil {
		logger = zap.NewNop()
	}
	m, err := newMetrics(c.Registerer, c.Stream)
	if err != nil {
		return nil, fmt.Errorf("error registering worker metrics: %w", err)
	}
	w := &Worker{
		st: st, rc: rc, group: rc.Group(stream.NewKeys(c.Stream, c.Group), c.Consumer), pool: pool, cfg: c, metrics: m, wake: make(chan struct{}, 1),
		logger: logger.Named("worker").With(zap.String("stream", c.Stream), zap.String("group", c.Group), zap.String("consumer", c.Consumer)),
	}
	// Only infrastructure failures open a circuit; a bad record, or an
	// error nobody recognises, does not (the streak rule bounds those).
	infra := func(err error) bool { return classify(err) == classInfra }
	for name, b := range map[string]**gobreaker.CircuitBreaker[struct{}]{
		failpolicy.SourcePostgres: &w.pgBreaker, failpolicy.SourceStore: &w.storeBreaker,
	} {
		*b = failpolicy.NewBreaker(failpolicy.BreakerConfig{
			Name: name, Failures: c.BreakerFailures, Timeout: c.BreakerTimeout, IsFailure: infra,
			State: m.breakerState.WithLabelValues(name),
		}, w.logger)
	}
	w.streak = failpolicy.NewStreak("worker", c.StreakLimit, m.streak, w.logger)
	w.life.Init(w.preflight, w.run)
	return w, nil
}

// Start checks that Redis, PostgreSQL and the store answer, creates the consumer group when missing and runs the worker in the background, as the type's
// documentation says; on a running worker it does nothing.
func (w *Worker) Start(ctx context.Context) error { return w.life.Start(ctx) }

// Stop stops reading and waits until the batch in flight is projected, marked and acknowledged; when ctx ends first the batch is abandoned (its entries stay pending) and Stop returns ctx's error. It is idempotent and safe before Start.
func (w *Worker) Stop(ctx context.Context) error { return w.life.Stop(ctx) }

// Stopped is closed while the worker is not running.
func (w *Worker) Stopped() <-chan struct{} { return w.life.Stopped() }

// Err returns what ended the last run: nil after a clean stop, or the
// error that stopped it on its own (an injected fault).
func (w *Worker) Err() error { return w.life.Err() }

// Consumer returns the worker's consumer name.
func (w *Worker) Consumer() string { return w.cfg.Consumer }

// ResumeRetries is the operator's action on the streak rule.
//
// When one error code comes Config.StreakLimit times in a row (seed 002:
// "the same error code 50 times: stop automatic retries and raise the
// alarm"), the worker halts automatic retries of that code's class,
// exports outboxd_retries_halted{component="worker",class} = 1 and logs
// an error. While a class is halted:
//   - record and unknown failures of the projection are no longer charged
//     to the records: the entries stay pending, held by this worker (never
//     dead-lettered because of the halt), and the worker reads nothing new
//     while it holds such entries; it tries them again once per
//     Config.BreakerTimeout, as a probe;
//   - infrastructure and unknown failures of an operation (reading the
//     stream, the store, PostgreSQL, acknowledging) are tried again once
//     per Config.BreakerTimeout instead of the jittered backoff.
//
// A halt clears by itself on a success of its class: for infrastructure
// and unknown failures, the dependency that failed answering again; for
// record failures, a record projected. ResumeRetries clears every halt at
// once and makes the held entries due now; restarting the worker does the
// same (the rule's state lives in the process). Either is logged at info
// level.
func (w *Worker) ResumeRetries() {
	w.streak.Resume()
	select {
	case w.wake <- struct{}{}:
	default:
	}
}

func (w *Worker) preflight(ctx context.Context) error {
	if err := w.rc.Ping(ctx); err != nil {
		return fmt.Errorf("error pinging Redis: %w", err)
	}
	if err := w.pool.Ping(ctx); err != nil {
		return fmt.Errorf("error pinging PostgreSQL: %w", err)
	}
	if err := w.st.Ping(ctx); err != nil {
		return fmt.Errorf("error reaching the store: %w", err)
	}
	return w.ensureGroup(ctx)
}

func (w *Worker) run(fetchCtx, workCtx context.Context) error {
	w.logger.Debug("worker started")
	w.held = map[string]heldEntry{}
	w.alive()
	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Go(func() { w.keepHeld(workCtx, stop) })
	err := w.loop(fetchCtx, workCtx)
	if a, ok := w.takeAhead(); ok {
		if err == nil && a.err == nil {
			// Read before the stop: in flight like the batch before it. After
			// an abrupt stop its entries stay pending, as after a crash.
			err = w.process(fetchCtx, workCtx, a.msgs, a.pre)
		}
	}
	close(stop)
	wg.Wait()
	w.metrics.held.Sub(float64(len(w.held)))
	if err != nil && classify(err) != classStopped {
		w.logger.Error("worker stopped abruptly", zap.Error(err))
		return err
	}
	w.logger.Debug("worker stopped")
	return nil
}

// loop drains this consumer's own pending entries, then alternates reading
// new entries with delivering held ones when due and reclaiming idle ones.
// It returns nil or a context error when asked to stop, and any other error
// to stop abruptly.
func (w *Worker) loop(fetchCtx, workCtx context.Context) error {
	if err := w.drainOwn(fetchCtx, workCtx); err != nil {
		return err
	}
	nextClaim := time.Now()
	housekeeping := w.housekeepingEvery()
	nextHousekeeping := time.Now().Add(housekeeping)
	for fetchCtx.Err() == nil {
		w.alive()
		select {
		case <-w.wake:
			w.makeDue()
		default:
		}
		if due := w.takeDue(time.Now()); len(due) > 0 {
			if err := w.process(fetchCtx, workCtx, due, nil); err != nil {
				return err
			}
			continue
		}
		if w.paused() {
			w.holdAhead()
			w.waitHeld(fetchCtx)
			continue
		}
		if !time.Now().Before(nextClaim) {
			if err := w.reclaim(fetchCtx, workCtx); err != nil {
				return err
			}
			nextClaim = time.Now().Add(w.cfg.ClaimInterval)
		}
		if !time.Now().Before(nextHousekeeping) {
			w.housekeep(fetchCtx)
			nextHousekeeping = time.Now().Add(housekeeping)
		}
		block := min(w.cfg.Block, max(time.Until(nextClaim), time.Millisecond))
		if next, ok := w.nextDue(); ok {
			block = min(block, max(time.Until(next), time.Millisecond))
		}
		msgs, pre, err := w.next(fetchCtx, block)
		if err != nil {
			return err
		}
		if len(msgs) == w.cfg.BatchSize && !w.paused() {
			w.readAhead(fetchCtx, workCtx)
		}
		if err := w.process(fetchCtx, workCtx, msgs, pre); err != nil {
			return err
		}
	}
	return nil
}

// aheadBatch is what a read-ahead read and prepared.
type aheadBatch struct {
	msgs []stream.Entry
	pre  *batch // nil when preparing failed: process prepares again
	err  error
}

// readAhead reads the next batch of new entries, without blocking, and
// prepares it (decode and one store read) while the loop writes the
// current one, so that a backlog costs the store read and the Redis round
// trip of each batch in parallel with the PostgreSQL transaction of the
// one before. The loop takes the result with next; the entries wait in this
// consumer's PEL meanwhile, like those of a batch being written.
func (w *Worker) readAhead(fetchCtx, workCtx context.Context) {
	ch := make(chan aheadBatch, 1)
	w.ahead = ch
	go func() {
		msgs, err := w.read(fetchCtx, ">", -1)
		var pre *batch
		if err == nil && len(msgs) > 0 {
			pre, _ = w.prepare(workCtx, msgs) // on failure process prepares again, through its retries
		}
		ch <- aheadBatch{msgs: msgs, pre: pre, err: err}
	}()
}

// holdAhead keeps the entries of a read-ahead as held ones, due now, when
// the worker pauses: they were read before the pause, and held they are
// touched (not taken over by another consumer) and delivered with the
// others when the pause ends.
func (w *Worker) holdAhead() {
	a, _ := w.takeAhead()
	now := time.Now()
	for _, m := range a.msgs {
		w.hold(heldEntry{msg: m, due: now})
	}
}

// takeAhead waits for the read-ahead in flight, if any, and returns what it
// read.
func (w *Worker) takeAhead() (aheadBatch, bool) {
	if w.ahead == nil {
		return aheadBatch{}, false
	}
	a := <-w.ahead
	w.ahead = nil
	return a, true
}

// next returns the batch a read-ahead prepared, or else reads new entries,
// waiting at most block for some.
func (w *Worker) next(fetchCtx context.Context, block time.Duration) ([]stream.Entry, *batch, error) {
	if a, ok := w.takeAhead(); ok && (a.err != nil || len(a.msgs) > 0) {
		return a.msgs, a.pre, a.err
	}
	msgs, err := w.read(fetchCtx, ">", block)
	return msgs, nil, err
}

// alive records a sign of life of the loop (see keepHeld).
func (w *Worker) alive() { w.beat.Store(time.Now().UnixNano()) }

// paused reports whether the worker holds entries of a class whose
// retries are halted: it reads nothing new until they go through or the
// halt clears.
func (w *Worker) paused() bool {
	return len(w.held) > 0 && (w.streak.Halted(failpolicy.ClassRecord) || w.streak.Halted(failpolicy.ClassUnknown))
}

// takeDue removes from held, and returns in id order, at most BatchSize
// entries due at now.
func (w *Worker) takeDue(now time.Time) []stream.Entry {
	var due []stream.Entry
	for _, id := range slices.Sorted(maps.Keys(w.held)) {
		if len(due) == w.cfg.BatchSize {
			break
		}
		if h := w.held[id]; !h.due.After(now) {
			due = append(due, h.msg)
			delete(w.held, id)
		}
	}
	w.metrics.held.Sub(float64(len(due)))
	return due
}

// nextDue returns when the next held entry is due.
func (w *Worker) nextDue() (time.Time, bool) {
	var next time.Time
	for _, h := range w.held {
		if next.IsZero() || h.due.Before(next) {
			next = h.due
		}
	}
	return next, !next.IsZero()
}

// makeDue makes every held entry due now (an operator resumed retries).
func (w *Worker) makeDue() {
	now := time.Now()
	for id, h := range w.held {
		h.due = now
		w.held[id] = h
	}
}

// waitHeld waits until the next held entry is due, ResumeRetries is
// called or fetchCtx ends.
func (w *Worker) waitHeld(fetchCtx context.Context) {
	next, _ := w.nextDue()
	t := time.NewTimer(max(time.Until(next), time.Millisecond))
	defer t.Stop()
	select {
	case <-fetchCtx.Done():
	case <-t.C:
	case <-w.wake:
		w.makeDue()
	}
}

// drainOwn processes the entries this consumer left pending (a restart under
// the same name), reading its PEL history from the start once.
func (w *Worker) drainOwn(fetchCtx, workCtx context.Context) error {
	start := "0"
	for fetchCtx.Err() == nil {
		msgs, err := w.read(fetchCtx, start, -1)
		if err != nil || len(msgs) == 0 {
			return err
		}
		start = msgs[len(msgs)-1].ID
		w.logger.Info("draining own pending entries", zap.Int("entries", len(msgs)))
		if err := w.process(fetchCtx, workCtx, msgs, nil); err != nil {
			return err
		}
	}
	return nil
}

// reclaim takes over entries pending and untouched longer than ClaimIdle,
// whichever consumer holds them (a live worker touches its own: see
// keepHeld), and processes them. Entries whose data was trimmed come back as
// deleted ids (Redis 7 has already removed them from the PEL); they are
// dead-lettered with reason trimmed.
func (w *Worker) reclaim(fetchCtx, workCtx context.Context) error {
	start := "0-0"
	for fetchCtx.Err() == nil {
		var msgs []stream.Entry
		var next string
		err := w.retry(fetchCtx, "claiming idle entries", func() error {
			var err error
			msgs, next, err = w.group.Reclaim(fetchCtx, start, w.cfg.ClaimIdle, w.cfg.BatchSize)
			return w.redisDone(err)
		})
		if err != nil {
			return err
		}
		// This worker's own held entries are due later, not now.
		msgs = slices.DeleteFunc(msgs, func(m stream.Entry) bool { _, held := w.held[m.ID]; return held })
		if len(msgs) > 0 {
			w.metrics.claimed.Add(float64(len(msgs)))
			w.logger.Info("reclaimed idle entries", zap.Int("entries", len(msgs)))
			if err := w.process(fetchCtx, workCtx, msgs, nil); err != nil {
				return err
			}
		}
		if next == "" || next == "0-0" {
			return nil
		}
		start = next
	}
	return nil
}

// read runs XREADGROUP from id (">" for new entries, or a PEL position);
// block < 0 sends no BLOCK. An empty read returns no messages and no error.
func (w *Worker) read(fetchCtx context.Context, id string, block time.Duration) ([]stream.Entry, error) {
	var msgs []stream.Entry
	err := w.retry(fetchCtx, "reading the stream", func() error {
		var err error
		msgs, err = w.group.Read(fetchCtx, id, w.cfg.BatchSize, block)
		return w.redisDone(err)
	})
	return msgs, err
}

// redisDone marks err as Redis's and records a success of Redis when it is
// nil.
func (w *Worker) redisDone(err error) error {
	if err == nil {
		w.streak.Succeed(failpolicy.SourceRedis)
	}
	return from(failpolicy.SourceRedis, err)
}

// process handles a batch until it succeeds, retrying infrastructure
// failures with backoff, then keeps what the batch holds for later. pre is
// the batch as a read-ahead prepared it, or nil. It
// returns nil when the batch is done or when a stop was requested while
// waiting (the entries then stay pending), and an error when the worker
// must stop abruptly.
func (w *Worker) process(fetchCtx, workCtx context.Context, msgs []stream.Entry, pre *batch) error {
	if len(msgs) == 0 {
		return nil
	}
	var out outcome
	err := w.retry(fetchCtx, "processing a batch", func() error {
		var err error
		out, err = w.handle(workCtx, msgs, pre)
		pre = nil // a retry reads the originals again
		return err
	})
	if err != nil {
		if classify(err) == classStopped {
			return nil
		}
		return err
	}
	w.apply(out)
	return nil
}

// retry runs op until it succeeds, backing off with jitter after
// infrastructure and unknown failures (once per BreakerTimeout while their
// class is halted) and recreating the consumer group after NOGROUP. Every
// failure counts for the streak rule. It stops early when fetchCtx ends
// (returning its error) and returns any other failure at once.
func (w *Worker) retry(fetchCtx context.Context, what string, op func() error) error {
	b := &failpolicy.HaltBackOff{
		Inner: backoff.NewExponentialBackOff(backoff.WithInitialInterval(min(50*time.Millisecond, w.cfg.BackoffMax)),
			backoff.WithMaxInterval(w.cfg.BackoffMax), backoff.WithMaxElapsedTime(0)),
		Streak: w.streak, Probe: w.cfg.BreakerTimeout,
	}
	attempts := 0
	return backoff.RetryNotify(func() error {
		w.alive()
		err := op()
		switch c := classify(err); c {
		case classOK:
			return nil
		case classNoGroup:
			w.metrics.retries.WithLabelValues("nogroup").Inc()
			w.logger.Warn("consumer group missing (Redis restarted empty?); recreating it")
			if gerr := w.ensureGroup(fetchCtx); gerr != nil {
				return from(failpolicy.SourceRedis, gerr)
			}
			return err
		case classInfra, classTxRetry, classUnknown:
			f := failureOf(err)
			w.streak.Fail(f)
			b.Class = f.Class
			reason := "infrastructure"
			if c == classUnknown {
				reason = "unknown"
			}
			w.metrics.retries.WithLabelValues(reason).Inc()
			return err
		default:
			return backoff.Permanent(err)
		}
	}, backoff.WithContext(b, fetchCtx), func(err error, d time.Duration) {
		attempts++
		if attempts > 1 && attempts%10 != 0 {
			return
		}
		f := failureOf(err)
		fields := []zap.Field{zap.String("code", f.Code), zap.Int("attempts", attempts), zap.Duration("backoff", d), zap.Error(err)}
		if f.Class == failpolicy.ClassUnknown {
			// Not recognised: say so loudly, it may need a rule.
			w.logger.Error("unclassified error "+what+"; retrying", fields...)
			return
		}
		w.logger.Warn("error "+what+"; retrying", fields...)
	})
}

// ensureGroup creates the consumer group, and the stream when missing, at
// the start of the stream so that entries added before the group are read.
func (w *Worker) ensureGroup(ctx context.Context) error {
	created, err := w.group.Ensure(ctx)
	if created {
		w.metrics.groupsCreated.Inc()
		w.logger.Info("created consumer group")
	}
	return err
}
