package worker

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/cenkalti/backoff/v4"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/redis/go-redis/v9"
	"github.com/sony/gobreaker/v2"
	"go.uber.org/zap"
	"golang.org/x/time/rate"

	"github.com/outboxd/outboxd/internal/failpolicy"
	"github.com/outboxd/outboxd/internal/leader"
	"github.com/outboxd/outboxd/internal/pause"
	"github.com/outboxd/outboxd/internal/startstop"
	"github.com/outboxd/outboxd/internal/stream"
	"github.com/outboxd/outboxd/store"
)

// Fault points (tests only). When one fires the worker stops at once, as if
// its process had crashed: nothing more is written and nothing acknowledged.
const (
	// faultAfterCommit fires after the PostgreSQL commit, before syncedAt.
	faultAfterCommit = "worker.after-commit"
	// faultAfterSyncedAt fires after syncedAt is set, before XACK.
	faultAfterSyncedAt = "worker.after-synced"
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

	st     store.Store
	rc     *stream.Client
	pool   *pgxpool.Pool
	cfg    *Config
	streak *failpolicy.Streak
	// r is the reader: it runs the loop (the run goroutine) and drives the
	// processor and the tail writer that newWorker wired to it.
	r *reader
}

// shared is what the reader, the processor and the tail writer share and
// each embeds: the configuration, the logger, the metrics, the streak rule,
// and the calls to the dependencies under the failure policy (retry,
// redisDone, storeCall).
type shared struct {
	cfg     *Config
	logger  *zap.Logger
	metrics *metrics
	streak  *failpolicy.Streak
	// storeBreaker is the store's circuit breaker (storeCall).
	storeBreaker *gobreaker.CircuitBreaker[struct{}]
	// regroup recreates the consumer groups after NOGROUP (the reader's
	// ensureGroup).
	regroup func(ctx context.Context) error
	// beat is when the loop, or an operation retry runs, last showed a
	// sign of life (Unix nanoseconds; see keepHeld).
	beat atomic.Int64
}

// New returns a Worker reading cfg.Stream as cfg.Group through the Redis
// client rdb (a single node, a cluster or Sentinel's: go-redis's
// UniversalClient) and projecting into pool. A nil cfg means all defaults.
// It does not touch the stores; Start does.
func New(st store.Store, rdb redis.UniversalClient, pool *pgxpool.Pool, cfg *Config, logger *zap.Logger) (*Worker, error) {
	rc, err := stream.NewClient(rdb, nil)
	if err != nil {
		return nil, fmt.Errorf("worker: %w", err)
	}
	return newWorker(st, rc, pool, cfg, logger)
}

// newWorker is New over the pipeline's Redis client.
func newWorker(st store.Store, rc *stream.Client, pool *pgxpool.Pool, cfg *Config, logger *zap.Logger) (*Worker, error) {
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
	keys := stream.NewKeys(c.Stream, c.Group).Partition(c.Partition, c.Partitions)
	sh := &shared{cfg: c, metrics: m,
		logger: logger.Named("worker").With(zap.String("stream", c.Stream), zap.String("group", c.Group), zap.String("consumer", c.Consumer)),
	}
	size := &sizing{}
	size.n.Store(int64(c.BatchSize))
	if c.AutoBatch {
		size.tune = newAutoBatch(AutoBatchMin, AutoBatchMax, c.BatchSize, c.ProjectionTarget)
		size.n.Store(int64(size.tune.size))
	}
	m.batchSizeNow.WithLabelValues(c.Consumer).Set(float64(size.get()))
	m.projectionTarget.Set(c.ProjectionTarget.Seconds())
	limit := float64(c.ReplayLimiter.Limit())
	if c.ReplayLimiter.Limit() == rate.Inf {
		limit = 0
	}
	m.replayRateLimit.Set(limit)
	// Only infrastructure failures open a circuit; a bad record, or an
	// error nobody recognises, does not (the streak rule bounds those).
	infra := func(err error) bool { return classify(err) == classInfra }
	var pgBreaker *gobreaker.CircuitBreaker[struct{}]
	for name, b := range map[string]**gobreaker.CircuitBreaker[struct{}]{
		failpolicy.SourcePostgres: &pgBreaker, failpolicy.SourceStore: &sh.storeBreaker,
	} {
		*b = failpolicy.NewBreaker(failpolicy.BreakerConfig{
			Name: name, Failures: c.BreakerFailures, Timeout: c.BreakerTimeout, IsFailure: infra,
			State: m.breakerState.WithLabelValues(name),
		}, sh.logger)
	}
	sh.streak = failpolicy.NewStreak("worker", c.StreakLimit, m.streak, sh.logger)
	r := &reader{shared: sh, st: st, rc: rc, group: rc.Group(keys, c.Consumer), replay: rc.Group(keys.ReplayLane(), c.Consumer),
		limiter: c.ReplayLimiter, size: size, wake: make(chan struct{}, 1)}
	r.proc = newProcessor(sh, st, rc, pool, pgBreaker, size)
	r.tail = &tailWriter{shared: sh, st: st, replay: r.replay, size: size, hold: r.hold}
	sh.regroup = r.ensureGroup
	sh.streak.Share(rc.Streak(keys, stream.ComponentWorker), r.wakeUp)
	if c.Ordered {
		r.elector = leader.New(st, leader.Config{
			Name: OrderedLeaseName(c.Stream, c.Group, c.Partition), Owner: c.Consumer, TTL: c.LeaseTTL, BackoffMax: c.BackoffMax,
		}, sh.logger)
	}
	r.livePause = pause.NewGate(st, c.Stream, c.Now, store.Stage{Kind: store.StageProjection, Group: c.Group})
	r.lanePause = pause.NewGate(st, c.Stream, c.Now, store.Stage{Kind: store.StageReplay, Group: c.Group})
	if err := pause.Export(c.Registerer, st, c.Stream, store.Stage{Kind: store.StageProjection, Group: c.Group},
		store.Stage{Kind: store.StageReplay, Group: c.Group}); err != nil {
		return nil, fmt.Errorf("error registering the pause gauge: %w", err)
	}
	w := &Worker{st: st, rc: rc, pool: pool, cfg: c, streak: sh.streak, r: r}
	w.life.Init(w.preflight, r.run)
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
// When one error code comes Config.StreakLimit times in a row ("the same
// error code 50 times: stop automatic retries and raise the alarm"), the
// worker halts automatic retries of that code's class,
// exports outboxd_retries_halted{component="worker",class} = 1 and logs
// an error. While a class is halted:
//   - record failures (a record's own fault, such as a payload the read
//     model refuses) of the halting code are not tried again: each such
//     record goes to the dead-letter stream at its failure, and the worker
//     goes on projecting every other record (one client's bad records
//     never stop the others');
//   - unknown failures of the projection are no longer charged to the
//     records: the entries stay pending, held by this worker (never
//     dead-lettered because of the halt), and the worker reads nothing new
//     while it holds such entries; it tries them again once per
//     Config.BreakerTimeout, as a probe;
//   - infrastructure and unknown failures of an operation (reading the
//     stream, the store, PostgreSQL, acknowledging) are tried again once
//     per Config.BreakerTimeout instead of the jittered backoff.
//
// The rule counts for the whole consumer group: its run and its halts are
// kept in Redis (stream.Keys.Streak), so the workers of every process
// count into one run and halt together (failures of Redis itself, and
// every failure while Redis cannot be reached, count in the process).
//
// A halt clears by itself on a success of its class, in any worker of the
// group: for infrastructure and unknown failures, the dependency that
// failed answering again; for record failures, a record projected.
// ResumeRetries clears every halt of the group at once and makes the held
// entries due now; so does `outboxd retries resume --class C` (the admin
// API, operator.ResumeRetries) for one class, which every worker sees
// within about a second (failpolicy.RefreshEvery). Restarting a worker no
// longer clears a halt: the group's state outlives it. Either is logged at
// info level.
func (w *Worker) ResumeRetries() {
	w.streak.Resume()
	w.r.wakeUp()
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
	// The store's record of the number of partitions (the first
	// component to start records it): another number would hash events
	// to partitions that the rest of the deployment does not read.
	if err := store.EnsurePartitions(ctx, w.st, w.cfg.Stream, max(w.cfg.Partitions, 1)); err != nil {
		return err
	}
	if p, ok := w.cfg.Projector.(Preparer); ok {
		if err := p.Prepare(ctx, w.pool); err != nil {
			return fmt.Errorf("error preparing the projector: %w", err)
		}
	}
	return w.r.ensureGroup(ctx)
}

// alive records a sign of life of the loop (see keepHeld).
func (s *shared) alive() { s.beat.Store(time.Now().UnixNano()) }

// redisDone marks err as Redis's and records a success of Redis when it is
// nil.
func (s *shared) redisDone(err error) error {
	if err == nil {
		s.streak.Succeed(failpolicy.SourceRedis)
	}
	return from(failpolicy.SourceRedis, err)
}

// unlessStopped returns nil for an error that only says the worker was
// asked to stop, and err otherwise.
func unlessStopped(err error) error {
	if classify(err) == classStopped {
		return nil
	}
	return err
}

// retry runs op until it succeeds, backing off with jitter after
// infrastructure and unknown failures (once per BreakerTimeout while their
// class is halted) and recreating the consumer group after NOGROUP. Every
// failure counts for the streak rule. It stops early when fetchCtx ends
// (returning its error) and returns any other failure at once.
func (s *shared) retry(fetchCtx context.Context, what string, op func() error) error {
	b := &failpolicy.HaltBackOff{
		Inner: backoff.NewExponentialBackOff(backoff.WithInitialInterval(min(50*time.Millisecond, s.cfg.BackoffMax)),
			backoff.WithMaxInterval(s.cfg.BackoffMax), backoff.WithMaxElapsedTime(0)),
		Streak: s.streak, Probe: s.cfg.BreakerTimeout,
	}
	attempts := 0
	return backoff.RetryNotify(func() error {
		s.alive()
		err := op()
		switch c := classify(err); c {
		case classOK:
			return nil
		case classNoGroup:
			s.metrics.retries.WithLabelValues("nogroup").Inc()
			s.logger.Warn("consumer group missing (Redis restarted empty?); recreating it")
			if gerr := s.regroup(fetchCtx); gerr != nil {
				return from(failpolicy.SourceRedis, gerr)
			}
			return err
		case classInfra, classTxRetry, classUnknown:
			f := failureOf(err)
			s.streak.Fail(f)
			b.Class = f.Class
			reason := "infrastructure"
			if c == classUnknown {
				reason = "unknown"
			}
			s.metrics.retries.WithLabelValues(reason).Inc()
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
			s.logger.Error("unclassified error "+what+"; retrying", fields...)
			return
		}
		s.logger.Warn("error "+what+"; retrying", fields...)
	})
}

// storeCall runs op through the store's circuit breaker.
func (s *shared) storeCall(op func() error) error {
	_, err := s.storeBreaker.Execute(func() (struct{}, error) { return struct{}{}, op() })
	if err == nil {
		s.streak.Succeed(failpolicy.SourceStore)
	}
	return from(failpolicy.SourceStore, err)
}
