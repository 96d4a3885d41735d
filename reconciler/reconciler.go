package reconciler

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"
	"go.uber.org/zap"

	"github.com/outboxd/outboxd/internal/bounds"
	"github.com/outboxd/outboxd/internal/fault"
	"github.com/outboxd/outboxd/internal/instance"
	"github.com/outboxd/outboxd/internal/leader"
	"github.com/outboxd/outboxd/internal/startstop"
	"github.com/outboxd/outboxd/internal/stream"
	"github.com/outboxd/outboxd/outbox"
	"github.com/outboxd/outboxd/store"
)

// Defaults of Config.
const (
	// MinAgeDefault is how old an unsynced original must be before the
	// reconciler touches it (--min-age).
	MinAgeDefault = 5 * time.Minute
	// RequeueAfterDefault is how long a claimed original is left alone
	// before it may be claimed again (--requeue-after).
	RequeueAfterDefault = 30 * time.Minute
	// LimitDefault is the most candidates one sweep handles (--limit).
	LimitDefault = 1000
	// MaxRequeuesDefault is how many times the reconciler re-publishes an
	// original before it parks it (--max-requeues).
	MaxRequeuesDefault = 10
	// EveryDefault is the default Config.Every of the service.
	EveryDefault = time.Minute
	// LeaseTTLDefault is the default Config.LeaseTTL.
	LeaseTTLDefault = 15 * time.Second
	// LeaseTTLShortest is the shortest accepted Config.LeaseTTL.
	LeaseTTLShortest = 30 * time.Millisecond
	// IntervalShortest is the shortest accepted Config.Interval other than
	// Every (--expected-every).
	IntervalShortest = time.Second
)

// Fault points (tests only).
const (
	// faultAfterClaim fires after a document is claimed and before it is
	// published, and ends the sweep as a crash would: the claim stays, so
	// the document is a candidate again only after RequeueAfter.
	faultAfterClaim = "reconciler.after-claim"
	// faultRollback makes the rollback of a failed publish fail, as a store
	// error would.
	faultRollback = "reconciler.rollback"
)

// rollbackTimeout bounds a rollback, which runs even when the sweep's
// context was cancelled.
const rollbackTimeout = 10 * time.Second

// Config configures a Reconciler. A nil config means all defaults.
type Config struct {
	// Message says what the re-published messages carry besides the
	// original's name and type (the payload), as ingest's do. Defaults to
	// nothing more.
	Message *outbox.MessageOptions
	// Stream is the stream the originals' messages are added to, the one
	// the dispatcher feeds. Defaults to outbox.StreamDefault.
	Stream string
	// Partitions is the stream's number of partitions (--partitions): each
	// original is re-published into its partition's stream. Defaults to 1.
	Partitions int
	// Routes re-publishes an original of a routed type to its route's
	// stream (with Partitions partitions too), where the writer recorded
	// its outbox entry: give it the writer's routes (--route). Defaults to
	// none: every original goes to Stream.
	Routes outbox.Routes
	// MinAge is how old (by createdAt) an unsynced original must be to be a
	// candidate, so events still flowing through the pipeline are left
	// alone. Defaults to MinAgeDefault (5 minutes).
	MinAge time.Duration
	// RequeueAfter is how long after a claim (lastRequeuedAt) an original
	// that is still unsynced may be claimed again. Defaults to
	// RequeueAfterDefault (30 minutes).
	RequeueAfter time.Duration
	// Limit is the most candidates one sweep handles, oldest first; the
	// next sweep continues. Defaults to LimitDefault (1000).
	Limit int
	// MaxRequeues is how many times an original may be re-published: a
	// candidate already requeued MaxRequeues times is parked instead, with
	// syncFailure category store.CategoryRequeueExhausted, for an operator
	// to look at (re-publishing it again and again is not a fix: something
	// downstream keeps failing it). Defaults to MaxRequeuesDefault (10).
	MaxRequeues int
	// Every is how often the service (Start) sweeps. Defaults to
	// EveryDefault (1 minute).
	Every time.Duration
	// Interval is how long is expected between two sweeps: Every for the
	// service, the schedule's period for one sweep run by cron (outboxd
	// reconcile --expected-every). It is exported as
	// outboxd_reconciler_interval_seconds, and the alert
	// OutboxdReconcilerSweepOverdue fires when no sweep ended for 3 × it.
	// Defaults to Every; another value is at least IntervalShortest (1s).
	Interval time.Duration
	// Lease makes the service sweep only while it holds the reconciler's
	// lease, so one replica sweeps at a time (outboxd reconcile --lease).
	// Defaults to false: every replica sweeps on its own schedule, and the
	// per-document claims keep each document published once. A lease over
	// the whole job lets one slow or wedged holder stop recovery for every
	// replica until its lease expires; keep it for
	// when the sweeps' load on the store must come from one replica only.
	Lease bool
	// LeaseTTL is the reconciler lease's TTL (with Lease, and for the
	// sweep records of RecordSweep). Defaults to LeaseTTLDefault (15s).
	LeaseTTL time.Duration
	// Owner names this reconciler in the lease. Defaults to
	// "<hostname>-<pid>".
	Owner string
	// Now tells the time for ages, thresholds and claim stamps. Defaults to
	// time.Now; tests set a fake clock.
	Now func() time.Time
	// Registerer receives the reconciler's metrics. Defaults to none (the
	// metrics are kept but not exported).
	Registerer prometheus.Registerer

	// faults arms fault points in tests (export_test.go).
	faults *fault.Set
	// beforeRollback runs after a failed publish, before its rollback
	// (tests only).
	beforeRollback func(id string)
}

// names names the instances that name none.
var names = instance.NewNamer("reconciler")

// withDefaults returns a copy of cfg with every unset field defaulted.
func (c *Config) withDefaults() *Config {
	out := c.defaults()
	if out.Owner == "" {
		out.Owner = names.Next()
	}
	if out.Now == nil {
		out.Now = time.Now
	}
	return out
}

// defaults returns a copy of cfg with every unset bounded field defaulted:
// what Validate checks (it names no owner).
func (c *Config) defaults() *Config {
	var out Config
	if c != nil {
		out = *c
	}
	out.Stream = cmp.Or(out.Stream, outbox.StreamDefault)
	out.MinAge = cmp.Or(out.MinAge, MinAgeDefault)
	out.RequeueAfter = cmp.Or(out.RequeueAfter, RequeueAfterDefault)
	out.Limit = cmp.Or(out.Limit, LimitDefault)
	out.MaxRequeues = cmp.Or(out.MaxRequeues, MaxRequeuesDefault)
	out.Every = cmp.Or(out.Every, EveryDefault)
	out.Interval = cmp.Or(out.Interval, out.Every)
	out.LeaseTTL = cmp.Or(out.LeaseTTL, LeaseTTLDefault)
	return &out
}

// Validate checks c as New takes it: a zero field takes its default, any
// other value must be within its field's bound. Each error is a field's,
// named by the field (MinAge, Limit, …), and they are joined. A nil config
// is valid. outboxd's flags are checked by it: the bounds of the
// reconciler's settings are here only.
func (c *Config) Validate() error {
	return c.defaults().validate()
}

// validate checks a defaulted config; each error names the field.
func (c *Config) validate() error {
	var errs []error
	if c.MinAge < 0 {
		// 0 is the default; outboxd's --min-age 0 reaches here as -1 and is
		// refused: a sweep of originals however young would re-publish the
		// work in flight.
		errs = append(errs, bounds.Errorf("MinAge", c.MinAge, "must be more than 0"))
	}
	// A claim must hold for some time, or concurrent runs would both claim
	// the same document; a millisecond is the stores' time precision.
	for _, f := range []struct {
		name string
		d    time.Duration
	}{{"RequeueAfter", c.RequeueAfter}, {"Every", c.Every}} {
		if f.d < time.Millisecond {
			errs = append(errs, bounds.Errorf(f.name, f.d, "must be at least 1ms"))
		}
	}
	// An Interval of its own is a schedule's period (cron's): Every's
	// bound holds when it is Every.
	if c.Interval != c.Every && c.Interval < IntervalShortest {
		errs = append(errs, bounds.Errorf("Interval", c.Interval, "must be at least %s", IntervalShortest))
	}
	if c.Limit < 1 {
		errs = append(errs, bounds.Errorf("Limit", c.Limit, "must be at least 1"))
	}
	if c.MaxRequeues < 1 {
		errs = append(errs, bounds.Errorf("MaxRequeues", c.MaxRequeues, "must be at least 1"))
	}
	if c.LeaseTTL < LeaseTTLShortest {
		errs = append(errs, bounds.Errorf("LeaseTTL", c.LeaseTTL, "must be at least %s", LeaseTTLShortest))
	}
	if err := c.Routes.Validate(); err != nil {
		errs = append(errs, bounds.Rule("Routes", "%v", err))
	}
	return errors.Join(errs...)
}

// Reconciler re-publishes originals that never reached syncedAt. Sweep runs
// one sweep on demand. As a service (package startstop's lifecycle), Start
// checks that Redis and the store answer, then sweeps every Config.Every
// (with Config.Lease only while this replica holds the reconciler's lease);
// Stop ends the schedule, a sweep in progress stopping between two
// documents.
type Reconciler struct {
	life startstop.Base

	st        store.Store
	rc        *stream.Client
	publisher *stream.Publisher
	cfg       *Config
	logger    *zap.Logger
	metrics   *metrics
	elector   *leader.Elector

	last atomic.Pointer[Report]
}

// New returns a Reconciler for the originals in st that publishes through
// the Redis client rdb (a single node, a cluster or Sentinel's: go-redis's
// UniversalClient). A nil cfg means all defaults; an invalid one is an error
// naming the field.
func New(st store.Store, rdb redis.UniversalClient, cfg *Config, logger *zap.Logger) (*Reconciler, error) {
	rc, err := stream.NewClient(rdb, nil)
	if err != nil {
		return nil, fmt.Errorf("reconciler: %w", err)
	}
	return newReconciler(st, rc, cfg, logger)
}

// newReconciler is New over the pipeline's Redis client.
func newReconciler(st store.Store, rc *stream.Client, cfg *Config, logger *zap.Logger) (*Reconciler, error) {
	if st == nil || rc == nil {
		return nil, errors.New("reconciler: a store and a Redis client are required")
	}
	c := cfg.withDefaults()
	if err := c.validate(); err != nil {
		return nil, fmt.Errorf("invalid reconciler config: %w", err)
	}
	if logger == nil {
		logger = zap.NewNop()
	}
	m, err := newMetrics(c.Registerer, c)
	if err != nil {
		return nil, fmt.Errorf("error registering reconciler metrics: %w", err)
	}
	r := &Reconciler{st: st, rc: rc, publisher: rc.Publisher(stream.NewKeys(c.Stream, "").Split(c.Partitions), &stream.PublisherConfig{Message: c.Message, Routes: c.Routes}, nil), cfg: c, metrics: m,
		logger: logger.Named("reconciler").With(zap.String("stream", c.Stream))}
	r.elector = leader.New(st, leader.Config{Name: LeaseName(c.Stream), Owner: c.Owner, TTL: c.LeaseTTL, Now: c.Now,
		Hooks: leader.Hooks{
			Elected: func(store.Lease) { m.leader.Set(1) },
			Demoted: func(store.Lease, error) { m.leader.Set(0) },
		}}, r.logger)
	r.life.Init(r.preflight, r.run)
	return r, nil
}

// Start checks that Redis and the store answer and runs the reconciler in the background, as the type's
// documentation says; on a running reconciler it does nothing.
func (r *Reconciler) Start(ctx context.Context) error { return r.life.Start(ctx) }

// Stop ends the schedule (a sweep in progress stops between two documents) and waits for it; when ctx ends first Stop returns ctx's error. It is idempotent and safe before Start.
func (r *Reconciler) Stop(ctx context.Context) error { return r.life.Stop(ctx) }

// Stopped is closed while the reconciler is not running.
func (r *Reconciler) Stopped() <-chan struct{} { return r.life.Stopped() }

// Err returns what ended the last run: nil after a clean stop, or the
// error that stopped it on its own (an injected fault).
func (r *Reconciler) Err() error { return r.life.Err() }

// LeaseName is the name of the periodic reconciler's lease of stream.
func LeaseName(stream string) string { return store.ReconcilerLeaseName(stream) }

func (r *Reconciler) preflight(ctx context.Context) error {
	if err := r.rc.Ping(ctx); err != nil {
		return fmt.Errorf("error reaching Redis: %w", err)
	}
	if err := r.st.Ping(ctx); err != nil {
		return fmt.Errorf("error reaching the store: %w", err)
	}
	// The store's record of the number of partitions (the first
	// component to start records it): another number would hash events
	// to partitions that the rest of the deployment does not read. Each
	// routed stream has as many.
	for _, s := range r.cfg.Routes.Streams(r.cfg.Stream) {
		if err := store.EnsurePartitions(ctx, r.st, s, max(r.cfg.Partitions, 1)); err != nil {
			return err
		}
	}
	return nil
}

// LastReport returns the report of the last sweep this Reconciler ran, or
// nil.
func (r *Reconciler) LastReport() *Report { return r.last.Load() }

func (r *Reconciler) run(fetchCtx, workCtx context.Context) error {
	r.logger.Debug("reconciler started", zap.Duration("every", r.cfg.Every), zap.Bool("lease", r.cfg.Lease))
	defer r.logger.Debug("reconciler stopped")
	if !r.cfg.Lease {
		r.schedule(fetchCtx, r.record)
		return nil
	}
	return r.elector.Run(fetchCtx, workCtx, func(ctx context.Context, _ store.Lease) error {
		r.schedule(ctx, r.record)
		return ctx.Err()
	})
}

// schedule sweeps at once and then every Config.Every until ctx ends,
// recording each sweep with record; a sweep that reached its limit is
// followed by the next one as soon as the workers have read what it
// published (waitNext).
func (r *Reconciler) schedule(ctx context.Context, record func(ctx context.Context)) {
	ticker := time.NewTicker(r.cfg.Every)
	defer ticker.Stop()
	for {
		rep := r.sweepAndLog(ctx)
		if ctx.Err() == nil {
			record(ctx)
		}
		if !r.waitNext(ctx, ticker.C, rep) {
			return
		}
	}
}

func (r *Reconciler) sweepAndLog(ctx context.Context) Report {
	rep, err := r.Sweep(ctx)
	switch {
	case err != nil && ctx.Err() != nil:
		r.logger.Debug("sweep interrupted", zap.Object("report", rep))
	case err != nil:
		r.logger.Error("sweep failed", zap.Object("report", rep), zap.Error(err))
	case rep.Failed():
		r.logger.Warn("sweep done with failures", zap.Object("report", rep))
	case rep.DidWork():
		r.logger.Info("sweep done", zap.Object("report", rep))
	default:
		r.logger.Debug("sweep done", zap.Object("report", rep))
	}
	return rep
}

// record writes the end of the last sweep (RecordSweep), where the status
// of every process reads it. A failure is only logged: the next sweep
// writes it again.
func (r *Reconciler) record(ctx context.Context) {
	if ctx.Err() != nil {
		return
	}
	if err := r.RecordSweep(ctx); err != nil && ctx.Err() == nil {
		r.logger.Warn("error recording the sweep", zap.Error(err))
	}
}

// RecordSweep records, for the status of every process, that a sweep just
// ended: the mark store.SweepMarkName, read by store.LastSweep. Any
// replica may record, with or without the lease; the mark keeps the latest
// time.
func (r *Reconciler) RecordSweep(ctx context.Context) error {
	if err := r.st.SetMark(ctx, store.SweepMarkName(r.cfg.Stream), r.now()); err != nil {
		return fmt.Errorf("error recording the sweep: %w", err)
	}
	return nil
}

// now returns the clock's time at the stores' millisecond precision, so a
// stamp written to a document compares equal when it is used in a filter.
func (r *Reconciler) now() time.Time { return r.cfg.Now().UTC().Truncate(time.Millisecond) }

// Sweep runs one sweep and reports what it did. Per-document failures are
// counted in the report (see Report.Failed); the error is for failures of
// the sweep itself: the candidate query, the store becoming unreachable,
// ctx ending, or an injected crash. The report holds what was done until
// then.
func (r *Reconciler) Sweep(ctx context.Context) (rep Report, err error) {
	began := time.Now()
	now := r.now()
	rep = Report{Stream: r.cfg.Stream, StartedAt: now}
	defer func() {
		rep.Duration = time.Since(began)
		r.metrics.observe(&rep, err)
		saved := rep
		r.last.Store(&saved)
	}()

	createdBefore := now.Add(-r.cfg.MinAge)
	// After a reset of Redis's data (store.RecordReset), every original
	// created before it is a candidate at once, whatever its age.
	reset, err := store.LastReset(ctx, r.st, r.cfg.Stream)
	if err != nil {
		return rep, fmt.Errorf("error reading the last reset of the stream: %w", err)
	}
	rep.ResetAt = reset
	if reset != nil && reset.After(createdBefore) && !reset.After(now) {
		createdBefore = *reset
	}
	ids, err := r.st.Candidates(ctx, store.CandidateQuery{
		CreatedBefore: createdBefore, ClaimedBefore: now.Add(-r.cfg.RequeueAfter), Limit: r.cfg.Limit,
	})
	if err != nil {
		return rep, fmt.Errorf("error querying reconciler candidates: %w", err)
	}
	rep.Scanned = len(ids)
	rep.LimitReached = len(ids) == r.cfg.Limit
	if len(ids) > 0 {
		if err := r.reconcile(ctx, ids, &rep); err != nil {
			return rep, err
		}
	}
	if err := r.measure(ctx, now, &rep); err != nil {
		return rep, err
	}
	return rep, nil
}

// reconcile claims ids, publishes what it claimed and rolls back the
// claims whose publish failed, counting the outcomes in rep: one claim,
// one pipeline (one per partition) and at most one rollback for the
// sweep, whatever its size, with each document's outcome exact (the
// pipeline reports each message: stream.Added). It returns an error only
// when the sweep must stop.
//
// Claiming the sweep at once has one cost: a reconciler that crashes
// between the claim and the publish leaves the whole sweep claimed, and
// those originals wait --requeue-after before a sweep takes them again
// (one at a time, it was one original).
func (r *Reconciler) reconcile(ctx context.Context, ids []string, rep *Report) error {
	attemptedAt := r.now()
	c, err := r.st.Claim(ctx, ids, attemptedAt, attemptedAt.Add(-r.cfg.RequeueAfter))
	switch {
	case err != nil && (ctx.Err() != nil || store.IsUnavailable(err)):
		return err
	case err != nil:
		rep.ClaimFailed += len(ids)
		r.logger.Warn("error claiming candidates", zap.Int("candidates", len(ids)), zap.Error(err))
		return nil
	}
	for id, err := range c.Unreadable {
		rep.ClaimFailed++
		r.logger.Warn("error reading candidate; it is not claimed", zap.String("event_id", id), zap.Error(err))
	}
	rep.Claimed += len(c.Events)
	rep.Skipped += len(ids) - len(c.Events) - len(c.Unreadable) // no longer candidates

	if err := r.cfg.faults.Check(faultAfterClaim); err != nil {
		return err
	}
	events, held := r.splitHeld(ctx, c.Events, attemptedAt)
	if len(held) > 0 {
		// Left alone, as if not claimed: a worker still holds their entry
		// and delivers it again (or dead-letters it); a copy would go
		// through twice, or reach the dead-letter stream twice.
		restored, rerr := r.rollback(ctx, held, attemptedAt)
		rep.Held += len(held)
		if rerr != nil {
			r.logger.Warn("error rolling back the claims of held events; they are candidates again after requeue-after",
				zap.Int("events", len(held)), zap.Error(rerr))
		}
		r.logger.Debug("events a worker holds left alone", zap.Int("events", len(held)), zap.Int("rolled_back", restored))
	}
	var publish, exhausted []*outbox.Event
	for _, ev := range events {
		if ev.RequeueCount >= int64(r.cfg.MaxRequeues) {
			exhausted = append(exhausted, ev)
		} else {
			publish = append(publish, ev)
		}
	}
	if err := r.exhaust(ctx, exhausted, attemptedAt, rep); err != nil {
		return err
	}
	if len(publish) == 0 {
		return nil
	}

	// Without a circuit breaker: every sweep tries, and the claims of what
	// did not go out are rolled back at once.
	err = r.publisher.PublishEvents(ctx, publish, outbox.OriginReconciler)
	var failed []*outbox.Event
	for i, ev := range publish {
		if stream.Added(err, i) {
			rep.Published++
			r.metrics.requeues.Observe(float64(ev.RequeueCount + 1))
		} else {
			failed = append(failed, ev)
		}
	}
	if len(failed) == 0 {
		return nil
	}
	rep.PublishFailed += len(failed)
	if rep.PublishError == "" {
		rep.PublishError = err.Error()
	}
	// Redis full: the next sweep would fail the same way (see waitNext).
	rep.RedisFull = stream.IsOOM(err)
	// One line per sweep says it (sweepAndLog), not one per document.
	r.logger.Debug("error publishing events, rolling back their claims", zap.Int("events", len(failed)), zap.Error(err))

	restored, rerr := r.rollback(ctx, failed, attemptedAt)
	switch {
	case rerr != nil:
		rep.RollbackFailed += len(failed)
		r.logger.Error("error rolling back claims; the events are candidates again after requeue-after",
			zap.Int("events", len(failed)), zap.Duration("requeue_after", r.cfg.RequeueAfter), zap.Error(rerr))
	default:
		rep.RolledBack += restored
		if skipped := len(failed) - restored; skipped > 0 {
			rep.RollbackSkipped += skipped
			r.logger.Info("claims not rolled back: newer claims own the events", zap.Int("events", skipped))
		}
	}
	return ctx.Err()
}

// splitHeld returns the events of evs that no worker holds, and those one
// does (stream.Keys.Held: an entry of theirs is pending in the group,
// waiting for a later delivery). When Redis cannot tell, every event is
// taken as not held: publishing it then fails the same way, or goes
// through as it did before the marks.
func (r *Reconciler) splitHeld(ctx context.Context, evs []*outbox.Event, now time.Time) (free, held []*outbox.Event) {
	byKeys := map[stream.Keys][]*outbox.Event{}
	keys := stream.NewKeys(r.cfg.Stream, "").Split(r.cfg.Partitions)
	for _, ev := range evs {
		k := keys.ForEvent(ev.SourceKey, ev.DeviceKey)
		byKeys[k] = append(byKeys[k], ev)
	}
	for k, part := range byKeys {
		ids := make([]string, len(part))
		for i, ev := range part {
			ids[i] = ev.ID
		}
		marked, err := r.rc.HeldAt(ctx, k, ids, now)
		if err != nil {
			r.logger.Debug("error reading held events; taking them as not held", zap.Error(err))
		}
		for _, ev := range part {
			if marked[ev.ID] {
				held = append(held, ev)
			} else {
				free = append(free, ev)
			}
		}
	}
	return free, held
}

// exhaust parks each of evs, claimed at attemptedAt and requeued
// MaxRequeues times already, instead of publishing it again, then undoes
// their claims so that requeueCount keeps counting publishes. Parking is
// one write per original: exhaustion is rare, and each one is logged.
func (r *Reconciler) exhaust(ctx context.Context, evs []*outbox.Event, attemptedAt time.Time, rep *Report) error {
	if len(evs) == 0 {
		return nil
	}
	for _, ev := range evs {
		logger := r.logger.With(zap.String("event_id", ev.ID), zap.Int64("requeue_count", ev.RequeueCount))
		parked, err := r.st.Park(ctx, ev.ID, outbox.SyncFailure{
			Category: store.CategoryRequeueExhausted, Code: store.CategoryRequeueExhausted,
			Message: fmt.Sprintf("re-published %d times by the reconciler without reaching syncedAt", ev.RequeueCount),
			At:      attemptedAt,
		})
		switch {
		case err != nil && (ctx.Err() != nil || store.IsUnavailable(err)):
			r.undoExhausted(ctx, evs, attemptedAt)
			return err
		case err != nil:
			rep.ClaimFailed++
			logger.Warn("error parking event whose requeues are exhausted", zap.Error(err))
		case parked:
			rep.Exhausted++
			r.metrics.exhausted.Inc()
			logger.Error("event parked: requeues exhausted; see the runbook (replay --state failed after the cause is fixed)",
				zap.Int("max_requeues", r.cfg.MaxRequeues))
		default:
			rep.Skipped++ // synced meanwhile
		}
	}
	r.undoExhausted(ctx, evs, attemptedAt)
	return ctx.Err()
}

// undoExhausted undoes the claims of exhausted originals (exhaust).
func (r *Reconciler) undoExhausted(ctx context.Context, evs []*outbox.Event, attemptedAt time.Time) {
	if _, err := r.rollback(ctx, evs, attemptedAt); err != nil {
		r.logger.Warn("error undoing the claims of parked events", zap.Int("events", len(evs)), zap.Error(err))
	}
}

// rollback undoes this run's claims on evs (their before-images), each
// only while its lastRequeuedAt still equals attemptedAt (the run's
// ownership token): a newer claim by another run is left alone. It runs
// even when ctx has ended, bounded by rollbackTimeout.
func (r *Reconciler) rollback(ctx context.Context, evs []*outbox.Event, attemptedAt time.Time) (int, error) {
	if r.cfg.beforeRollback != nil {
		for _, ev := range evs {
			r.cfg.beforeRollback(ev.ID)
		}
	}
	if err := r.cfg.faults.Check(faultRollback); err != nil {
		return 0, err
	}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), rollbackTimeout)
	defer cancel()
	return r.st.RollbackClaims(ctx, attemptedAt, evs)
}

// measure fills the state part of rep from the store's counts: the age of
// the oldest unsynced, unparked original (claimed or not) and the parked
// originals by category.
func (r *Reconciler) measure(ctx context.Context, now time.Time, rep *Report) error {
	c, err := r.st.Counts(ctx)
	if err != nil {
		return fmt.Errorf("error reading the store's counts: %w", err)
	}
	if c.OldestPending != nil {
		rep.OldestUnsyncedAge = max(now.Sub(*c.OldestPending), 0)
	}
	rep.Failures = map[string]int64{}
	for _, cat := range knownCategories {
		rep.Failures[cat] = 0
	}
	for cat, n := range c.FailedByCategory {
		if !slices.Contains(knownCategories, cat) {
			cat = CategoryOther
		}
		rep.Failures[cat] += n
	}
	return nil
}

// CategoryOther counts, in Report.Failures, parked originals whose
// syncFailure category is none of the known ones.
const CategoryOther = store.CategoryOther

var knownCategories = []string{outbox.CategoryNonRetryable, outbox.CategoryPoison, store.CategoryRequeueExhausted}
