package worker

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"maps"
	"math"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/cenkalti/backoff/v4"
	"github.com/jackc/pgx/v5"
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
	"github.com/outboxd/outboxd/outbox"
	"github.com/outboxd/outboxd/store"
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

	st    store.Store
	rc    *stream.Client
	group *stream.Group
	// replay is the consumer on the replay lane (stream.Keys.ReplayLane),
	// read only when the stream has no backlog, at most at limiter's rate.
	replay       *stream.Group
	limiter      *rate.Limiter
	pool         *pgxpool.Pool
	cfg          *Config
	logger       *zap.Logger
	metrics      *metrics
	pgBreaker    *gobreaker.CircuitBreaker[struct{}]
	storeBreaker *gobreaker.CircuitBreaker[struct{}]
	streak       *failpolicy.Streak
	// beginSQL begins a projection transaction with its timeouts; begin
	// are its statements one by one (beginStatements).
	beginSQL string
	begin    []string
	// pipelines: the pool's connections cache prepared statements (pgx's
	// default_query_exec_mode cache_statement, the default, or
	// cache_describe), so a PipelinedProjector's transactions go in one
	// round trip (projectPipelined). In the other modes, chosen for a
	// connection pooler, they go as a pgx.Tx.
	pipelines bool
	// elector holds the partition's lease of an Ordered worker; nil
	// otherwise.
	elector *leader.Elector
	// livePause and lanePause tell whether an operator paused the group's
	// live projection or its replay lane (store.Pause); liveOff and
	// laneOff are what the loop last read of them (only the run goroutine
	// touches those).
	livePause, lanePause *pause.Gate
	liveOff, laneOff     bool
	// cancelledBefore is the last cancel of the replays (store.
	// LastReplayCancel), read at most every pause.RefreshEvery
	// (cancelRead): entries the lane took before it are not projected.
	// Only the run goroutine touches them.
	cancelledBefore, cancelRead time.Time

	// size is the current batch size (Config.BatchSize, or the choice of
	// tune when Config.AutoBatch is set); tune is nil without AutoBatch
	// and only the run goroutine calls it.
	size atomic.Int64
	tune *autoBatch

	// held are the entries this worker keeps pending for a later delivery,
	// by heldKey; only the run goroutine touches it.
	held map[string]heldEntry
	// ahead delivers the batch a read-ahead is reading, or is nil; only the
	// run goroutine touches it.
	ahead chan aheadBatch
	// behind is the tail of the last batch while it is written behind the
	// next batch's PostgreSQL transaction (process), or nil; only the run
	// goroutine touches it.
	behind *behindTail
	// gather is the tails of small batches gathered to be written as one
	// (Config.TailGather) until gatherUntil, or nil; only the run
	// goroutine touches them.
	gather      *tail
	gatherUntil time.Time
	// laneTurn is set when the last read of the stream found no backlog:
	// the replay lane gets the next turn. Only the run goroutine touches
	// it.
	laneTurn bool
	// wake tells the run goroutine that ResumeRetries was called.
	wake chan struct{}
	// beat is when the run goroutine last showed a sign of life (Unix
	// nanoseconds).
	beat atomic.Int64
}

// heldEntry is an entry of g kept pending until due.
type heldEntry struct {
	g   *stream.Group
	msg stream.Entry
	due time.Time
	// group is the message group of the entry (messageGroup), set by
	// hold: Ordered, a held entry holds only the later entries of its
	// group.
	group string
}

// messageGroup names the message group of a device's events: the events
// an Ordered worker projects in order, and that one failing event holds.
func messageGroup(sourceKey, deviceKey string) string { return sourceKey + "\x00" + deviceKey }

// entryGroup is the message group of the event m carries ("" when m does
// not decode).
func entryGroup(m stream.Entry) string {
	if m.Values == nil {
		return ""
	}
	msg, err := m.Message()
	if err != nil {
		return ""
	}
	return messageGroup(msg.SourceKey, msg.DeviceKey)
}

// heldKey is the key of entry id of g in held: the ids of two streams may
// be equal.
func heldKey(g *stream.Group, id string) string { return g.Keys().Stream() + "\x00" + id }

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
	w := &Worker{
		st: st, rc: rc, group: rc.Group(keys, c.Consumer), replay: rc.Group(keys.ReplayLane(), c.Consumer), limiter: c.ReplayLimiter,
		pool: pool, cfg: c, metrics: m, wake: make(chan struct{}, 1), beginSQL: beginSQL(c.LockTimeout, c.StatementTimeout),
		begin: beginStatements(c.LockTimeout, c.StatementTimeout),
		pipelines: slices.Contains([]pgx.QueryExecMode{pgx.QueryExecModeCacheStatement, pgx.QueryExecModeCacheDescribe},
			pool.Config().ConnConfig.DefaultQueryExecMode),
		logger: logger.Named("worker").With(zap.String("stream", c.Stream), zap.String("group", c.Group), zap.String("consumer", c.Consumer)),
	}
	w.size.Store(int64(c.BatchSize))
	if c.AutoBatch {
		w.tune = newAutoBatch(AutoBatchMin, AutoBatchMax, c.BatchSize, c.ProjectionTarget)
		w.size.Store(int64(w.tune.size))
	}
	m.batchSizeNow.WithLabelValues(c.Consumer).Set(float64(w.size.Load()))
	m.projectionTarget.Set(c.ProjectionTarget.Seconds())
	limit := float64(w.limiter.Limit())
	if w.limiter.Limit() == rate.Inf {
		limit = 0
	}
	m.replayRateLimit.Set(limit)
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
	w.streak.Share(rc.Streak(keys, stream.ComponentWorker), w.wakeUp)
	if c.Ordered {
		w.elector = leader.New(st, leader.Config{
			Name: OrderedLeaseName(c.Stream, c.Group, c.Partition), Owner: c.Consumer, TTL: c.LeaseTTL, BackoffMax: c.BackoffMax,
		}, w.logger)
	}
	w.livePause = pause.NewGate(st, c.Stream, c.Now, store.Stage{Kind: store.StageProjection, Group: c.Group})
	w.lanePause = pause.NewGate(st, c.Stream, c.Now, store.Stage{Kind: store.StageReplay, Group: c.Group})
	if err := pause.Export(c.Registerer, st, c.Stream, store.Stage{Kind: store.StageProjection, Group: c.Group},
		store.Stage{Kind: store.StageReplay, Group: c.Group}); err != nil {
		return nil, fmt.Errorf("error registering the pause gauge: %w", err)
	}
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
	w.wakeUp()
}

// wakeUp tells the run goroutine that retries were resumed: its held
// entries become due now.
func (w *Worker) wakeUp() {
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
	return w.ensureGroup(ctx)
}

func (w *Worker) run(fetchCtx, workCtx context.Context) error {
	w.logger.Debug("worker started")
	w.held = map[string]heldEntry{}
	w.alive()
	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Go(func() { w.keepHeld(workCtx, stop) })
	var err error
	if w.elector != nil {
		err = w.elector.Run(fetchCtx, workCtx, func(leaseCtx context.Context, _ store.Lease) error {
			return w.own(leaseCtx, workCtx)
		})
	} else {
		err = w.loop(fetchCtx, workCtx)
	}
	if unlessStopped(err) != nil {
		if w.behind != nil {
			w.behind.cancel()
		}
		w.dropGather(err) // pending, as after a crash
	}
	if berr := w.settle(fetchCtx, workCtx); err == nil {
		err = berr
	}
	if a, ok := w.takeAhead(); ok {
		if err == nil && a.err == nil {
			// Read before the stop: in flight like the batch before it. After
			// an abrupt stop its entries stay pending, as after a crash.
			err = w.process(fetchCtx, workCtx, w.group, a.msgs, a.pre)
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

// own runs the loop of an Ordered worker while it holds its partition's
// lease (leaseCtx ends when the lease is lost or the worker stops). A lost
// lease abandons the batch in flight at once: its entries stay pending, and
// the next owner claims them before anything newer. Entries held from an
// earlier tenure are forgotten: they are pending, claimed again.
func (w *Worker) own(leaseCtx, workCtx context.Context) error {
	w.metrics.held.Sub(float64(len(w.held)))
	clear(w.held)
	ctx, cancel := context.WithCancel(workCtx)
	defer cancel()
	stopLost := context.AfterFunc(leaseCtx, func() {
		if errors.Is(context.Cause(leaseCtx), leader.ErrLost) {
			cancel()
		}
	})
	defer stopLost()
	err := w.loop(leaseCtx, ctx)
	if err != nil && classify(err) != classStopped {
		return leader.Abort(err) // a fault point: stop at once, as a crash
	}
	return nil
}

// claimAll makes every entry pending in the partition's stream (the
// previous owner's) this consumer's, so that drainOwn then projects them
// in id order with its own.
func (w *Worker) claimAll(fetchCtx context.Context) error {
	start := "0-0"
	for fetchCtx.Err() == nil {
		var next string
		err := w.retry(fetchCtx, "claiming the partition's pending entries", func() error {
			var err error
			_, next, err = w.group.Reclaim(fetchCtx, start, 0, w.batchSize())
			return w.redisDone(err)
		})
		if err != nil || next == "" || next == "0-0" {
			return err
		}
		start = next
	}
	return nil
}

// loop drains this consumer's own pending entries, then alternates reading
// new entries with delivering held ones when due and reclaiming idle ones.
// It returns nil or a context error when asked to stop, and any other error
// to stop abruptly.
func (w *Worker) loop(fetchCtx, workCtx context.Context) error {
	w.readPauses(fetchCtx)
	if w.cfg.Ordered {
		if err := w.claimAll(fetchCtx); err != nil {
			return err
		}
	}
	if err := w.drainOwn(fetchCtx, workCtx); err != nil {
		return err
	}
	nextClaim := time.Now()
	nextRecover := time.Now().Add(w.cfg.ClaimIdle)
	housekeeping := w.housekeepingEvery()
	nextHousekeeping := time.Now().Add(housekeeping)
	for fetchCtx.Err() == nil {
		w.alive()
		w.streak.Refresh(fetchCtx)
		select {
		case <-w.wake:
			w.makeDue()
		default:
		}
		w.readPauses(fetchCtx)
		if w.gather != nil && !time.Now().Before(w.gatherUntil) {
			if err := w.flushGather(fetchCtx, workCtx); err != nil {
				return err
			}
		}
		if w.liveOff && w.laneOff {
			// Both lanes paused by an operator: project nothing (what was
			// read is held, touched, until the resume).
			if err := w.settle(fetchCtx, workCtx); err != nil {
				return err
			}
			w.holdAhead()
			w.waitResumed(fetchCtx)
			continue
		}
		if g, due := w.takeDue(time.Now()); len(due) > 0 {
			if err := w.process(fetchCtx, workCtx, g, due, nil); err != nil {
				return err
			}
			continue
		}
		if w.paused() {
			if err := w.settle(fetchCtx, workCtx); err != nil {
				return err
			}
			w.holdAhead()
			w.waitHeld(fetchCtx)
			continue
		}
		if !time.Now().Before(nextClaim) {
			// Entries the tail behind holds are not reclaimed.
			if err := w.settle(fetchCtx, workCtx); err != nil {
				return err
			}
			if err := w.reclaim(fetchCtx, workCtx); err != nil {
				return err
			}
			nextClaim = time.Now().Add(w.cfg.ClaimInterval)
		}
		if !time.Now().Before(nextRecover) {
			if err := w.flushGather(fetchCtx, workCtx); err != nil {
				return err
			}
			if err := w.recoverOwn(fetchCtx); err != nil {
				return err
			}
			nextRecover = time.Now().Add(w.cfg.ClaimIdle)
			continue // the recovered entries are due now
		}
		if !time.Now().Before(nextHousekeeping) {
			w.housekeep(fetchCtx)
			nextHousekeeping = time.Now().Add(housekeeping)
		}
		block := min(w.cfg.Block, max(time.Until(nextClaim), time.Millisecond))
		if next, ok := w.nextDue(); ok {
			block = min(block, max(time.Until(next), time.Millisecond))
		}
		if w.gather != nil {
			block = min(block, max(time.Until(w.gatherUntil), time.Millisecond))
		}
		g, msgs, pre, err := w.next(fetchCtx, block)
		if err != nil {
			return err
		}
		if w.readPauses(fetchCtx); !w.open(g) {
			// Paused while the read waited: hold what it read, touched,
			// until the resume.
			now := time.Now()
			for _, m := range msgs {
				w.hold(heldEntry{g: g, msg: m, due: now})
			}
			continue
		}
		if g == w.group && len(msgs) == w.batchSize() && !w.paused() && !w.cfg.Ordered && !w.liveOff {
			w.readAhead(fetchCtx, workCtx)
		}
		if err := w.process(fetchCtx, workCtx, g, msgs, pre); err != nil {
			return err
		}
		if g == w.group {
			w.throttle(fetchCtx, len(msgs))
		}
	}
	return nil
}

// throttle takes n live events from the group's projection rate
// (Config.ProjectionRate) and waits while the group is ahead of it.
func (w *Worker) throttle(fetchCtx context.Context, n int) {
	r := w.cfg.ProjectionRate
	if r <= 0 || r == rate.Inf || n == 0 {
		return
	}
	burst := max(1, int(math.Ceil(float64(r)/20)))
	d, err := w.rc.Throttle(fetchCtx, w.group.Keys(), float64(r), burst, n)
	if err != nil {
		w.logger.Debug("projection rate not read; going on unthrottled", zap.Error(err))
		return
	}
	if d > 0 {
		w.metrics.throttled.Add(d.Seconds())
		w.sleep(fetchCtx, d)
	}
}

// batchSize is the current batch size.
func (w *Worker) batchSize() int { return int(w.size.Load()) }

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
		msgs, err := w.read(fetchCtx, w.group, ">", w.batchSize(), -1)
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
		w.hold(heldEntry{g: w.group, msg: m, due: now})
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

// next returns the batch a read-ahead prepared, or else new entries of the
// stream, or else, when the stream has no backlog for the worker, new
// entries of the replay lane within the lane's rate; with neither it waits
// at most block for entries of the stream or, when the rate allows, of the
// lane (one XREADGROUP over both: entries of the lane that come with
// entries of the stream are held, due now, for the next turn). It returns
// the consumer whose entries it returns.
//
// The stream has no backlog when a read of it comes back empty, or with
// less than a batch: then the lane gets the next turn (w.laneTurn), so
// that a trickle of live events, which leaves the stream empty only for
// moments, does not starve the lane. A live event then waits for at most
// one batch of the lane (a twentieth of a second of the rate).
func (w *Worker) next(fetchCtx context.Context, block time.Duration) (*stream.Group, []stream.Entry, *batch, error) {
	if a, ok := w.takeAhead(); ok && (a.err != nil || len(a.msgs) > 0) {
		w.laneTurn = len(a.msgs) < w.batchSize()
		return w.group, a.msgs, a.pre, a.err
	}
	if w.liveOff || w.laneOff {
		return w.nextOpen(fetchCtx, block)
	}
	if w.laneTurn {
		w.laneTurn = false
		if n, _ := w.replayAllowance(); n > 0 {
			msgs, err := w.read(fetchCtx, w.replay, ">", n, -1)
			if err != nil || len(msgs) > 0 {
				w.spendReplay(len(msgs))
				return w.replay, msgs, nil, err
			}
		}
	}
	msgs, err := w.read(fetchCtx, w.group, ">", w.batchSize(), -1)
	if err != nil || len(msgs) > 0 {
		w.laneTurn = len(msgs) < w.batchSize()
		return w.group, msgs, nil, err
	}
	// Nothing to project: settle the tail behind (its holds and counts)
	// before waiting for entries.
	if err := w.settleBehind(); err != nil {
		return w.group, nil, nil, err
	}
	n, wait := w.replayAllowance()
	if n == 0 {
		msgs, err = w.read(fetchCtx, w.group, ">", w.batchSize(), min(block, max(wait, time.Millisecond)))
		return w.group, msgs, nil, err
	}
	if msgs, err = w.read(fetchCtx, w.replay, ">", n, -1); err != nil || len(msgs) > 0 {
		w.spendReplay(len(msgs))
		return w.replay, msgs, nil, err
	}
	var both [][]stream.Entry
	err = w.retry(fetchCtx, "reading the stream and the replay lane", func() error {
		var err error
		both, err = stream.ReadNew(fetchCtx, n, block, w.group, w.replay)
		return w.redisDone(err)
	})
	if err != nil {
		return w.group, nil, nil, err
	}
	w.spendReplay(len(both[1]))
	if len(both[0]) == 0 {
		return w.replay, both[1], nil, nil
	}
	now := time.Now()
	for _, m := range both[1] {
		w.hold(heldEntry{g: w.replay, msg: m, due: now})
	}
	return w.group, both[0], nil, nil
}

// nextOpen is next while an operator paused one of the lanes: it reads
// the other one only, waiting at most block (the replay lane within its
// rate).
func (w *Worker) nextOpen(fetchCtx context.Context, block time.Duration) (*stream.Group, []stream.Entry, *batch, error) {
	if err := w.settleBehind(); err != nil {
		return w.group, nil, nil, err
	}
	if w.laneOff {
		msgs, err := w.read(fetchCtx, w.group, ">", w.batchSize(), min(block, pause.RefreshEvery))
		return w.group, msgs, nil, err
	}
	n, wait := w.replayAllowance()
	if n == 0 {
		w.sleep(fetchCtx, min(block, max(wait, time.Millisecond)))
		return w.replay, nil, nil, nil
	}
	msgs, err := w.read(fetchCtx, w.replay, ">", n, min(block, pause.RefreshEvery))
	w.spendReplay(len(msgs))
	return w.replay, msgs, nil, err
}

// readPauses reads whether an operator paused the group's live
// projection or its replay lane (at most every pause.RefreshEvery), and
// logs a change.
func (w *Worker) readPauses(ctx context.Context) {
	for _, l := range []struct {
		gate *pause.Gate
		off  *bool
		lane string
	}{{w.livePause, &w.liveOff, "live"}, {w.lanePause, &w.laneOff, "replay"}} {
		p := l.gate.Paused(ctx)
		if off := p != nil; off != *l.off {
			*l.off = off
			if off {
				w.logger.Info("paused by an operator: projecting nothing of this lane until resumed", zap.String("lane", l.lane),
					zap.String("stage", p.Stage), zap.String("by", p.By))
			} else {
				w.logger.Info("resumed by an operator", zap.String("lane", l.lane))
			}
		}
	}
}

// open reports whether g's lane is not paused by an operator.
func (w *Worker) open(g *stream.Group) bool {
	if g == w.replay {
		return !w.laneOff
	}
	return !w.liveOff
}

// waitResumed waits while both lanes are paused: until a pause may have
// ended (pause.RefreshEvery), or fetchCtx ends.
func (w *Worker) waitResumed(fetchCtx context.Context) { w.sleep(fetchCtx, pause.RefreshEvery) }

// sleep waits d or until fetchCtx ends.
func (w *Worker) sleep(fetchCtx context.Context, d time.Duration) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-fetchCtx.Done():
	case <-t.C:
	}
}

// replayAllowance returns how many entries of the replay lane the rate
// allows now: a batch of the lane (a batch, at most the limiter's burst:
// a twentieth of a second of the rate), or 0 and how long until one. Reading
// whatever the rate allowed since the last read would read the lane an
// entry at a time.
func (w *Worker) replayAllowance() (int, time.Duration) {
	size := w.batchSize()
	if w.limiter.Limit() == rate.Inf {
		return size, 0
	}
	want := float64(min(size, max(w.limiter.Burst(), 1)))
	if tokens := w.limiter.TokensAt(time.Now()); tokens < want {
		return 0, time.Duration((want - tokens) / float64(w.limiter.Limit()) * float64(time.Second))
	}
	return int(want), 0
}

// spendReplay takes n entries of the replay lane from its rate.
func (w *Worker) spendReplay(n int) {
	if n > 0 && w.limiter.Limit() != rate.Inf {
		w.limiter.ReserveN(time.Now(), n)
	}
}

// alive records a sign of life of the loop (see keepHeld).
func (w *Worker) alive() { w.beat.Store(time.Now().UnixNano()) }

// paused reports whether the worker holds entries while retries of the
// unknown class are halted (a streak of record errors holds nothing): it
// reads nothing new until they go through or the halt clears. (Ordered, a
// held entry holds only its own message group: see heldFirst.)
func (w *Worker) paused() bool {
	if len(w.held) == 0 {
		return false
	}
	return w.streak.Halted(failpolicy.ClassUnknown)
}

// heldFirst returns, Ordered, the id of the first entry of the stream
// held for each message group: a newer entry of that group waits behind
// it. It returns nil without Ordered.
func (w *Worker) heldFirst() map[string]string {
	if !w.cfg.Ordered {
		return nil
	}
	first := map[string]string{}
	for _, h := range w.held {
		if h.g != w.group {
			continue
		}
		if id, ok := first[h.group]; !ok || stream.CompareIDs(h.msg.ID, id) < 0 {
			first[h.group] = h.msg.ID
		}
	}
	return first
}

// takeDue removes from held, and returns in id order, at most a batch of
// entries due at now, all of one consumer (the stream's first), and that
// consumer.
//
// Ordered, the stream's held entries go in id order within their message
// group: one not due yet holds back the later ones of its group.
func (w *Worker) takeDue(now time.Time) (*stream.Group, []stream.Entry) {
	var g *stream.Group
	var due []stream.Entry
	keys := slices.SortedFunc(maps.Keys(w.held), func(a, b string) int {
		ha, hb := w.held[a], w.held[b]
		if ha.g != hb.g {
			return cmp.Compare(w.lane(ha.g), w.lane(hb.g)) // "live" before "replay"
		}
		return stream.CompareIDs(ha.msg.ID, hb.msg.ID)
	})
	blocked := map[string]bool{} // Ordered: message groups held back
	for _, k := range keys {
		if len(due) == w.batchSize() {
			break
		}
		h := w.held[k]
		if !w.open(h.g) {
			continue
		}
		if w.cfg.Ordered && h.g == w.group {
			if blocked[h.group] || h.due.After(now) {
				blocked[h.group] = true
				continue
			}
		}
		if !h.due.After(now) && (g == nil || h.g == g) {
			g = h.g
			due = append(due, h.msg)
			delete(w.held, k)
		}
	}
	w.metrics.held.Sub(float64(len(due)))
	return g, due
}

// nextDue returns when the next held entry is due. Ordered, the stream's
// held entries of a message group are due when the group's first (in id
// order) is: it holds back the others.
func (w *Worker) nextDue() (time.Time, bool) {
	var next time.Time
	first := map[string]heldEntry{} // Ordered: each group's first held entry
	for _, h := range w.held {
		if !w.open(h.g) {
			continue // its lane is paused
		}
		if w.cfg.Ordered && h.g == w.group {
			if f, ok := first[h.group]; !ok || stream.CompareIDs(h.msg.ID, f.msg.ID) < 0 {
				first[h.group] = h
			}
			continue
		}
		if next.IsZero() || h.due.Before(next) {
			next = h.due
		}
	}
	for _, h := range first {
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
// called or fetchCtx ends, at most failpolicy.RefreshEvery (the loop then
// reads the group's streak: another process may have resumed).
func (w *Worker) waitHeld(fetchCtx context.Context) {
	next, _ := w.nextDue()
	t := time.NewTimer(min(max(time.Until(next), time.Millisecond), failpolicy.RefreshEvery))
	defer t.Stop()
	select {
	case <-fetchCtx.Done():
	case <-t.C:
	case <-w.wake:
		w.makeDue()
	}
}

// recoverOwn holds, due now, this consumer's pending entries the worker
// does not know of. Redis can run an XREADGROUP or XAUTOCLAIM whose reply
// the worker never gets (it timed out while Redis was stopped, and Redis
// ran it when it resumed; a connection cut after the command went out):
// the entries are then pending to this consumer, and keepHeld touches
// every pending entry of the consumer, so no worker's XAUTOCLAIM would
// take them over while this one lives. The loop runs it every ClaimIdle,
// between batches, after the tail behind is written and with the
// read-ahead's entries held, so that the held entries are everything the
// worker knows is pending: the rest of its pending entries (listed with
// XPENDING, which delivers nothing) are the lost ones, and only they are
// read. An entry is thus recovered within about ClaimIdle, as a dead
// worker's would be taken over.
func (w *Worker) recoverOwn(fetchCtx context.Context) error {
	if err := w.settleBehind(); err != nil {
		return err
	}
	w.holdAhead()
	for _, g := range w.groups() {
		var lost []string
		for after := ""; fetchCtx.Err() == nil; {
			var ids []string
			err := w.retry(fetchCtx, "listing own pending entries", func() error {
				var err error
				ids, err = g.OwnPending(fetchCtx, after, w.batchSize())
				return w.redisDone(err)
			})
			if err != nil {
				return err
			}
			if len(ids) == 0 {
				break
			}
			after = ids[len(ids)-1]
			for _, id := range ids {
				if _, held := w.held[heldKey(g, id)]; !held {
					lost = append(lost, id)
				}
			}
		}
		if len(lost) == 0 {
			continue
		}
		var msgs []stream.Entry
		err := w.retry(fetchCtx, "reading lost entries", func() error {
			var err error
			msgs, err = g.Entries(fetchCtx, lost)
			return w.redisDone(err)
		})
		if err != nil {
			return err
		}
		now := time.Now()
		for _, m := range msgs {
			w.hold(heldEntry{g: g, msg: m, due: now})
		}
		w.metrics.recovered.Add(float64(len(msgs)))
		w.logger.Warn("recovered pending entries whose delivery the worker missed", zap.Int("entries", len(msgs)), zap.String("lane", w.lane(g)))
	}
	return nil
}

// drainOwn processes the entries this consumer left pending (a restart under
// the same name) on the stream, then on the replay lane, reading its PEL
// history from the start once.
func (w *Worker) drainOwn(fetchCtx, workCtx context.Context) error {
	for _, g := range w.groups() {
		if !w.open(g) {
			continue // its pending entries are recovered after the resume (recoverOwn)
		}
		start := "0"
		for fetchCtx.Err() == nil {
			msgs, err := w.read(fetchCtx, g, start, w.batchSize(), -1)
			if err != nil {
				return err
			}
			if len(msgs) == 0 {
				break
			}
			start = msgs[len(msgs)-1].ID
			w.logger.Info("draining own pending entries", zap.Int("entries", len(msgs)), zap.String("lane", w.lane(g)))
			if err := w.process(fetchCtx, workCtx, g, msgs, nil); err != nil {
				return err
			}
		}
	}
	return nil
}

// groups are the consumers of the worker: on the stream, then on its
// replay lane.
func (w *Worker) groups() []*stream.Group { return []*stream.Group{w.group, w.replay} }

// lane names the lane of g for logs: "live" or "replay".
func (w *Worker) lane(g *stream.Group) string { return g.Keys().Lane() }

// reclaim takes over entries pending and untouched longer than ClaimIdle,
// whichever consumer holds them (a live worker touches its own: see
// keepHeld), and processes them. Entries whose data was trimmed come back as
// deleted ids (Redis 7 has already removed them from the PEL); they are
// dead-lettered with reason trimmed.
func (w *Worker) reclaim(fetchCtx, workCtx context.Context) error {
	for _, g := range w.groups() {
		if !w.open(g) {
			continue
		}
		if err := w.reclaimFrom(fetchCtx, workCtx, g); err != nil {
			return err
		}
	}
	return nil
}

// reclaimFrom is reclaim on the stream of g.
func (w *Worker) reclaimFrom(fetchCtx, workCtx context.Context, g *stream.Group) error {
	start := "0-0"
	for fetchCtx.Err() == nil {
		var msgs []stream.Entry
		var next string
		err := w.retry(fetchCtx, "claiming idle entries", func() error {
			var err error
			msgs, next, err = g.Reclaim(fetchCtx, start, w.cfg.ClaimIdle, w.batchSize())
			return w.redisDone(err)
		})
		if err != nil {
			return err
		}
		// This worker's own held entries are due later, not now.
		msgs = slices.DeleteFunc(msgs, func(m stream.Entry) bool { _, held := w.held[heldKey(g, m.ID)]; return held })
		if len(msgs) > 0 {
			w.metrics.claimed.Add(float64(len(msgs)))
			w.logger.Info("reclaimed idle entries", zap.Int("entries", len(msgs)), zap.String("lane", w.lane(g)))
			if err := w.process(fetchCtx, workCtx, g, msgs, nil); err != nil {
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

// read runs XREADGROUP as g from id (">" for new entries, or a PEL
// position) for at most count entries; block < 0 sends no BLOCK. An empty
// read returns no messages and no error.
func (w *Worker) read(fetchCtx context.Context, g *stream.Group, id string, count int, block time.Duration) ([]stream.Entry, error) {
	var msgs []stream.Entry
	err := w.retry(fetchCtx, "reading the stream", func() error {
		var err error
		msgs, err = g.Read(fetchCtx, id, count, block)
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

// process handles a batch of g's entries until it succeeds, retrying
// infrastructure failures with backoff, then keeps what the batch holds
// for later. pre is the batch as a read-ahead prepared it, or nil. It
// returns nil when the batch is done or when a stop was requested while
// waiting (the entries then stay pending), and an error when the worker
// must stop abruptly.
func (w *Worker) process(fetchCtx, workCtx context.Context, g *stream.Group, msgs []stream.Entry, pre *batch) error {
	if g == w.replay {
		var err error
		if msgs, err = w.dropCancelled(fetchCtx, workCtx, msgs); err != nil {
			return err
		}
	}
	if len(msgs) == 0 {
		return nil
	}
	var t *tail
	err := w.retry(fetchCtx, "processing a batch", func() error {
		var err error
		t, err = w.handle(workCtx, g, msgs, pre)
		pre = nil // a retry reads the originals again
		return err
	})
	if err != nil {
		return unlessStopped(err)
	}
	if err := w.settleBehind(); err != nil {
		return err
	}
	if w.gathers(fetchCtx, t, len(msgs)) {
		w.addGather(t)
		if len(w.gather.ack) < w.batchSize() {
			return nil
		}
		return w.flushGather(fetchCtx, workCtx)
	}
	if err := w.flushGather(fetchCtx, workCtx); err != nil {
		return err
	}
	if w.ahead != nil && !w.cfg.Ordered {
		done := make(chan error, 1)
		tailCtx, cancel := context.WithCancel(fetchCtx)
		w.behind = &behindTail{t: t, done: done, cancel: cancel}
		go func() {
			defer cancel()
			done <- w.writeTailRetrying(tailCtx, workCtx, t)
		}()
		return nil
	}
	if err := w.writeTailRetrying(fetchCtx, workCtx, t); err != nil {
		return unlessStopped(err)
	}
	w.apply(g, t.out)
	return nil
}

// dropCancelled acknowledges, unprojected, the entries of the replay lane
// added before the last cancel of the replays (operator.CancelReplay),
// and returns the others: a cancelled replay's entries a worker had
// already read (held, or read while the cancel removed the rest) are not
// projected either. A failed read of the cancel drops nothing. The entry
// ids are Redis's times and the cancel the operator's: a skew between the
// clocks moves the line by as much.
func (w *Worker) dropCancelled(fetchCtx, workCtx context.Context, msgs []stream.Entry) ([]stream.Entry, error) {
	if time.Since(w.cancelRead) >= pause.RefreshEvery {
		w.cancelRead = time.Now()
		if at, err := store.LastReplayCancel(fetchCtx, w.st, w.cfg.Stream); err == nil && at != nil {
			w.cancelledBefore = *at
		}
	}
	if w.cancelledBefore.IsZero() {
		return msgs, nil
	}
	var drop []string
	keep := msgs[:0:0]
	for _, m := range msgs {
		if at, ok := stream.IDTime(m.ID); ok && at.Before(w.cancelledBefore) {
			drop = append(drop, m.ID)
			continue
		}
		keep = append(keep, m)
	}
	if len(drop) == 0 {
		return msgs, nil
	}
	err := w.retry(fetchCtx, "acknowledging a cancelled replay's entries", func() error {
		return w.finish(workCtx, w.replay, nil, drop, nil)
	})
	if err != nil {
		return nil, unlessStopped(err)
	}
	w.metrics.replayCancelled.Add(float64(len(drop)))
	w.logger.Info("entries of a cancelled replay acknowledged unprojected", zap.Int("entries", len(drop)))
	return keep, nil
}

// behindTail is the tail of a batch written while the loop goes on with
// the next batch.
type behindTail struct {
	t    *tail
	done <-chan error
	// cancel ends the tail's retries (an abrupt stop leaves its entries
	// pending, as a crash would).
	cancel context.CancelFunc
}

// writeTailRetrying writes t (writeTail) until it succeeds, retrying
// infrastructure failures like process, then ends the batch's spans.
func (w *Worker) writeTailRetrying(fetchCtx, workCtx context.Context, t *tail) error {
	err := w.retry(fetchCtx, "finishing a batch", func() error { return w.writeTail(workCtx, t) })
	t.endSpans(err)
	return err
}

// settleBehind waits for the tail written behind the loop, if any, and
// applies its outcome. It returns nil when the tail was written or a stop
// interrupted it (its entries then stay pending), and the error that stops
// the worker otherwise.
func (w *Worker) settleBehind() error {
	if w.behind == nil {
		return nil
	}
	b := w.behind
	w.behind = nil
	if err := <-b.done; err != nil {
		return unlessStopped(err)
	}
	w.apply(b.t.g, b.t.out)
	return nil
}

// settle writes the gathered tails and waits for the tail written behind
// the loop, applying their outcomes (flushGather, settleBehind).
func (w *Worker) settle(fetchCtx, workCtx context.Context) error {
	if err := w.flushGather(fetchCtx, workCtx); err != nil {
		return err
	}
	return w.settleBehind()
}

// gathers says whether the tail t of a batch of n entries waits for the
// tails after it (Config.TailGather): a batch smaller than the batch size
// whose every event was projected, read by the same consumer as the tails
// gathered already, while the worker is not stopping.
func (w *Worker) gathers(fetchCtx context.Context, t *tail, n int) bool {
	return w.cfg.TailGather > 0 && !w.cfg.Ordered && n < w.batchSize() && fetchCtx.Err() == nil &&
		len(t.parked) == 0 && len(t.charge) == 0 && len(t.out.hold) == 0 && len(t.out.dead) == 0 &&
		len(t.out.failures) == 0 && (w.gather == nil || w.gather.g == t.g)
}

// addGather adds t to the gathered tails; the first starts the wait.
func (w *Worker) addGather(t *tail) {
	if w.gather == nil {
		w.gather = t
		w.gatherUntil = time.Now().Add(min(w.cfg.TailGather, w.cfg.ClaimIdle/10))
		return
	}
	g := w.gather
	g.firstSync = append(g.firstSync, t.firstSync...)
	if g.origins == nil {
		g.origins = map[string]outbox.Origin{}
	}
	maps.Copy(g.origins, t.origins)
	g.ack = append(g.ack, t.ack...)
	g.out.synced += t.out.synced
	g.gathered = append(g.gathered, t.spans)
}

// flushGather writes the gathered tails, if any, as one (writeTail) and
// applies their outcome.
func (w *Worker) flushGather(fetchCtx, workCtx context.Context) error {
	t := w.gather
	if t == nil {
		return nil
	}
	w.gather = nil
	if err := w.writeTailRetrying(fetchCtx, workCtx, t); err != nil {
		return unlessStopped(err)
	}
	w.apply(t.g, t.out)
	return nil
}

// dropGather forgets the gathered tails after an abrupt stop (err): their
// entries stay pending, as after a crash.
func (w *Worker) dropGather(err error) {
	if w.gather != nil {
		w.gather.endSpans(err)
		w.gather = nil
	}
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
// the start of the stream so that entries added before the group are read;
// and the same on the replay lane. Creating the stream's group records a
// reset in the store (store.RecordReset): a group that was not there may
// have vanished with entries (the first start of a deployment records one
// too, which only lets the reconciler re-publish a few in-flight originals
// early, without a duplicate effect).
func (w *Worker) ensureGroup(ctx context.Context) error {
	for _, g := range w.groups() {
		created, err := g.Ensure(ctx)
		if created {
			w.metrics.groupsCreated.Inc()
			w.logger.Info("created consumer group", zap.String("lane", w.lane(g)))
			if g == w.group {
				// Redis may have lost entries with the group: the
				// reconciler takes the unsynced originals at once.
				if err := store.RecordReset(ctx, w.st, w.cfg.Stream, w.cfg.Now()); err != nil {
					w.logger.Warn("error recording the consumer group's reset in the store", zap.Error(err))
				}
			}
		}
		if err != nil {
			return err
		}
	}
	return nil
}
