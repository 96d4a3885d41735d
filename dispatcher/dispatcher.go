package dispatcher

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"

	"github.com/redis/go-redis/v9"
	"go.uber.org/zap"

	"github.com/outboxd/outboxd/internal/failpolicy"
	"github.com/outboxd/outboxd/internal/leader"
	"github.com/outboxd/outboxd/internal/maintenance"
	"github.com/outboxd/outboxd/internal/pause"
	"github.com/outboxd/outboxd/internal/startstop"
	"github.com/outboxd/outboxd/internal/stream"
	"github.com/outboxd/outboxd/store"
)

// Fault points (tests only). When one fires the dispatcher stops at once as
// if the process had died: no further write, no checkpoint, no lease
// release; Err reports the fault.
const (
	// faultAfterXAdd fires after a batch was added to the stream, before
	// its entries are marked dispatched and before the checkpoint.
	faultAfterXAdd = "dispatcher.after-xadd"
	// faultAfterMark fires after the batch was marked dispatched and its
	// checkpoint written (one store write, store.Store.MarkRelayed), before
	// the batch is counted.
	faultAfterMark = "dispatcher.after-mark"
)

// Stats are counts of one Dispatcher since New.
type Stats struct {
	// Relayed counts entries added to the stream, duplicates included.
	Relayed int64
	// CaughtUp counts the part of Relayed found by catch-up scans of the
	// outbox rather than by the feed.
	CaughtUp int64
	// Dispatched counts entries marked dispatched.
	Dispatched int64
	// Batches counts batches marked dispatched.
	Batches int64
	// Writes counts the store writes that marked them: batches relayed
	// while a write ran are merged into the next (Config.MarkInterval).
	Writes int64
	// HistoryLost counts lost feed positions.
	HistoryLost int64
	// Invalidated counts feeds ended by a dropped or renamed outbox.
	Invalidated int64
	// RedisRetries counts failed XADD pipelines that were retried.
	RedisRetries int64
	// Fenced counts leaderships lost to a newer term or an expired lease.
	Fenced int64
	// Trimmed counts acknowledged entries this dispatcher trimmed from the
	// stream and its replay lane.
	Trimmed int64
	// Leader is true while this dispatcher holds the lease.
	Leader bool
	// Term is the fencing term of the lease held most recently (0: never).
	Term int64
}

// Dispatcher relays the outbox entries of one stream into Redis. See the
// package documentation.
//
// Its lifecycle is package startstop's: Start checks that Redis and the
// store answer and runs it in the background (standby until it takes the
// stream's lease, then relaying); Stop stops reading, lets the batch in
// flight finish (XADD, dispatchedAt, checkpoint), releases the lease and
// returns, or abandons the batch when its context ends first (the entries
// stay undispatched and are relayed again later); Err reports a fault point
// that stopped it abruptly.
type Dispatcher struct {
	life startstop.Base

	st        store.Store
	rc        *stream.Client
	publisher *stream.Publisher
	cfg       *Config
	logger    *zap.Logger
	metrics   *metrics
	elector   *leader.Elector
	streak    *failpolicy.Streak

	pressure pressure
	// watch trims the stream and watches Redis's memory (its verdict is
	// the relay's hold), retention deletes what is past its retention
	// (nil but on the whole stream or partition 0): the leader's
	// maintenance services, run while it leads (lead).
	watch     *maintenance.Watch
	retention *maintenance.Retention
	// paused tells whether an operator paused the relay of this partition,
	// or of all (store.Pause).
	paused *pause.Gate

	relayed, caughtUp, dispatched, batches, writes, historyLost, invalidated, redisRetries, fenced, term atomic.Int64
	leader                                                                                               atomic.Bool

	// sharing is set on the Dispatcher of a partitioned stream, which
	// runs one Dispatcher per partition (partitions.go).
	sharing *sharing
}

// New returns a Dispatcher that relays the outbox of st into the stream
// through the Redis client rdb (a single node, a cluster or Sentinel's: go-redis's
// UniversalClient). A nil cfg means all defaults; an invalid one is an error
// naming the field.
func New(st store.Store, rdb redis.UniversalClient, cfg *Config, logger *zap.Logger) (*Dispatcher, error) {
	rc, err := stream.NewClient(rdb, nil)
	if err != nil {
		return nil, fmt.Errorf("dispatcher: %w", err)
	}
	return newDispatcher(st, rc, cfg, logger)
}

// newDispatcher is New over the pipeline's Redis client.
func newDispatcher(st store.Store, rc *stream.Client, cfg *Config, logger *zap.Logger) (*Dispatcher, error) {
	if st == nil || rc == nil {
		return nil, errors.New("dispatcher: a store and a Redis client are required")
	}
	c := cfg.withDefaults()
	if err := c.validate(); err != nil {
		return nil, fmt.Errorf("invalid dispatcher config: %w", err)
	}
	if c.Partitions > 1 && c.part.Count == 0 {
		return newSharing(st, rc, c, logger)
	}
	m, err := newMetrics(c.Registerer, c.Stream, c.part)
	if err != nil {
		return nil, fmt.Errorf("error registering dispatcher metrics: %w", err)
	}
	wm, err := maintenance.NewWatchMetrics(partitionRegisterer(c.Registerer, c.part), c.Stream)
	if err != nil {
		return nil, fmt.Errorf("error registering dispatcher metrics: %w", err)
	}
	if logger == nil {
		logger = zap.NewNop()
	}
	d := &Dispatcher{
		st: st, rc: rc, cfg: c, metrics: m,
		logger: logger.Named("dispatcher").With(zap.String("stream", c.Stream), zap.String("owner", c.Owner)),
	}
	keys := d.keys()
	d.newMaintenance(wm)
	d.publisher = d.newPublisher()
	d.streak = failpolicy.NewStreak(component, c.StreakLimit, m.streak, d.logger)
	d.streak.Share(rc.Streak(keys, component), nil)
	relayStages := []store.Stage{{Kind: store.StageRelay, Partition: store.StageAllPartitions}, {Kind: store.StageRelay, Partition: c.part.Index}}
	d.paused = pause.NewGate(st, c.Stream, c.Now, relayStages...)
	if err := pause.Export(c.Registerer, st, c.Stream, relayStages...); err != nil {
		return nil, fmt.Errorf("error registering the pause gauge: %w", err)
	}
	d.elector = leader.New(st, leader.Config{
		Name: PartitionLeaseName(c.Stream, c.part), Owner: c.Owner, TTL: c.LeaseTTL, Now: c.Now, BackoffMax: c.BackoffMax,
		Hooks: leader.Hooks{Elected: d.elected, Demoted: d.demoted}, Gate: c.gate,
	}, d.logger)
	d.life.Init(d.preflight, d.run)
	return d, nil
}

// Start checks that Redis and the store answer and runs the dispatcher in the background, as the type's
// documentation says; on a running dispatcher it does nothing.
func (d *Dispatcher) Start(ctx context.Context) error { return d.life.Start(ctx) }

// Stop stops reading, lets the batch in flight finish (XADD, dispatchedAt, checkpoint) and releases the lease; when ctx ends first the batch is abandoned (its entries stay undispatched) and Stop returns ctx's error. It is idempotent and safe before Start.
func (d *Dispatcher) Stop(ctx context.Context) error { return d.life.Stop(ctx) }

// Stopped is closed while the dispatcher is not running.
func (d *Dispatcher) Stopped() <-chan struct{} { return d.life.Stopped() }

// Err returns what ended the last run: nil after a clean stop, or the
// error that stopped it on its own (an injected fault).
func (d *Dispatcher) Err() error { return d.life.Err() }

// ResumeRetries is the operator's action on the streak rule.
//
// When one error code comes Config.StreakLimit times in a row,
// the dispatcher halts automatic retries of that code's class, exports
// outboxd_retries_halted{component="dispatcher",class} = 1 and logs an
// error. While halted, the failing operation (the XADD of a batch, or
// opening the feed and relaying when the store fails) is tried once per
// Config.BreakerTimeout instead of after the jittered back-off; nothing is
// marked dispatched or checkpointed meanwhile, exactly as during any
// outage. The halt clears by itself when the failing dependency answers
// again, or with ResumeRetries (an operator action, as is `outboxd
// retries resume --class C`). The rule's state is every dispatcher's of
// the stream, kept in Redis (stream.Keys.Streak), so a dispatcher that
// takes over inherits the run and a restart does not clear a halt;
// failures of Redis itself count in the process. Either is logged at info
// level. A dispatcher that stops leading drops its own view of the rule
// (its series go to 0; the leader exports the rule).
func (d *Dispatcher) ResumeRetries() {
	if d.sharing != nil {
		for _, p := range d.sharing.parts {
			p.ResumeRetries()
		}
		return
	}
	d.streak.Resume()
}

// keys are the keys of the stream (or partition) this dispatcher relays.
func (d *Dispatcher) keys() stream.Keys {
	return stream.NewKeys(d.cfg.Stream, "").Partition(d.cfg.part.Index, d.cfg.part.Count)
}

// newPublisher returns the dispatcher's stream.Publisher, with a new
// circuit breaker around Redis (closed; outboxd_dispatcher_breaker_state
// says so).
func (d *Dispatcher) newPublisher() *stream.Publisher {
	return d.rc.Publisher(d.keys(), &stream.PublisherConfig{Breaker: &failpolicy.BreakerConfig{
		Name: failpolicy.SourceRedis, Failures: d.cfg.BreakerFailures, Timeout: d.cfg.BreakerTimeout, State: d.metrics.breaker,
		// A full Redis answers: it does not open the circuit, the hold
		// (pressure.go) waits for room instead.
		IsFailure: func(err error) bool { return err != nil && !stream.IsOOM(err) },
	}}, d.logger)
}

// component names the dispatcher for the streak rule (its metrics and its
// shared state, stream.Keys.Streak).
const component = stream.ComponentDispatcher

// LeaseName is the name of the dispatcher's lease of stream, which also
// holds its checkpoint: the stream's name.
func LeaseName(stream string) string { return store.DispatcherLeaseName(stream) }

// Config returns the configuration in effect, defaults applied.
func (d *Dispatcher) Config() Config { return *d.cfg }

func (d *Dispatcher) preflight(ctx context.Context) error {
	if err := d.rc.Ping(ctx); err != nil {
		return fmt.Errorf("error reaching Redis: %w", err)
	}
	if err := d.st.Ping(ctx); err != nil {
		return fmt.Errorf("error reaching the store: %w", err)
	}
	// The store's record of the number of partitions (the first
	// component to start records it): another number would hash events
	// to partitions that the rest of the deployment does not read.
	if err := store.EnsurePartitions(ctx, d.st, d.cfg.Stream, max(d.cfg.Partitions, 1)); err != nil {
		return err
	}
	return nil
}

// Stats returns the dispatcher's counts (of every partition it relays;
// Leader when it holds at least one, Term the highest of theirs).
func (d *Dispatcher) Stats() Stats {
	if d.sharing != nil {
		return d.sharing.stats()
	}
	return Stats{
		Relayed: d.relayed.Load(), CaughtUp: d.caughtUp.Load(), Dispatched: d.dispatched.Load(),
		Batches: d.batches.Load(), Writes: d.writes.Load(), HistoryLost: d.historyLost.Load(), Invalidated: d.invalidated.Load(),
		RedisRetries: d.redisRetries.Load(), Fenced: d.fenced.Load(), Leader: d.leader.Load(), Term: d.term.Load(),
		Trimmed: d.watch.Trimmed(),
	}
}

// run alternates between standby and leadership until fetchCtx ends; the
// batch in flight finishes on workCtx.
func (d *Dispatcher) run(fetchCtx, workCtx context.Context) error {
	d.logger.Debug("dispatcher started")
	defer d.logger.Debug("dispatcher stopped")
	err := d.elector.Run(fetchCtx, workCtx, func(ctx context.Context, lease store.Lease) error {
		return d.lead(ctx, workCtx, lease)
	})
	if err != nil {
		d.logger.Warn("dispatcher stopped abruptly", zap.Error(err))
	}
	return err
}

func (d *Dispatcher) elected(lease store.Lease) {
	d.term.Store(lease.Term)
	d.leader.Store(true)
	d.metrics.term.Set(float64(lease.Term))
	d.metrics.leader.Set(1)
}

func (d *Dispatcher) demoted(_ store.Lease, cause error) {
	d.leader.Store(false)
	d.metrics.leader.Set(0)
	if errors.Is(cause, leader.ErrLost) {
		d.fenced.Add(1)
		d.metrics.fenced.Inc()
	}
}
