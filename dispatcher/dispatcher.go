package dispatcher

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/256dpi/lungo"
	"github.com/cenkalti/backoff/v4"
	"github.com/redis/go-redis/v9"
	"go.mongodb.org/mongo-driver/bson"
	"go.mongodb.org/mongo-driver/bson/primitive"
	"go.mongodb.org/mongo-driver/mongo"
	"go.mongodb.org/mongo-driver/mongo/options"
	"go.mongodb.org/mongo-driver/mongo/readpref"
	"go.uber.org/zap"

	"github.com/outboxd/outboxd/internal/fault"
	"github.com/outboxd/outboxd/internal/mongodb"
	"github.com/outboxd/outboxd/outbox"
)

// Fault points (tests only). When one fires the dispatcher stops at once as
// if the process had died: no further write, no checkpoint, no lease
// release; Err reports the fault.
const (
	// FaultAfterXAdd fires after a batch was added to the stream, before
	// its entries are marked dispatched and before the checkpoint.
	FaultAfterXAdd = "dispatcher.after-xadd"
	// FaultAfterMark fires after the batch was marked dispatched, before
	// the checkpoint.
	FaultAfterMark = "dispatcher.after-mark"
)

// errPositionLost marks a change stream that failed at once after resuming
// from the saved token.
var errPositionLost = errors.New("change stream failed right after resuming from the saved token")

// ErrAlreadyStarted is returned by Start on a Dispatcher that was started
// or stopped before.
var ErrAlreadyStarted = errors.New("dispatcher already started or stopped")

// Stats are counts of one Dispatcher since New.
type Stats struct {
	// Relayed counts entries added to the stream, duplicates included.
	Relayed int64
	// CaughtUp counts the part of Relayed found by catch-up scans of the
	// outbox rather than by the change stream.
	CaughtUp int64
	// Dispatched counts entries marked dispatched (dispatchedAt set).
	Dispatched int64
	// Batches counts batches marked dispatched.
	Batches int64
	// HistoryLost counts lost change-stream positions.
	HistoryLost int64
	// RedisRetries counts failed XADD pipelines that were retried.
	RedisRetries int64
	// Fenced counts leaderships lost to a newer term or an expired lease.
	Fenced int64
	// Leader is true while this dispatcher holds the lease.
	Leader bool
	// Term is the fencing term of the lease held most recently (0: never).
	Term int64
}

// Dispatcher relays outbox entries of one stream into Redis. See the
// package documentation.
type Dispatcher struct {
	db      lungo.IDatabase
	outbox  lungo.ICollection
	state   lungo.ICollection
	rdb     redis.UniversalClient
	cfg     *Config
	logger  *zap.Logger
	metrics *metrics

	mu         sync.Mutex
	started    bool
	cancelRun  context.CancelFunc
	cancelHard context.CancelFunc
	stopped    chan struct{}
	stopOnce   sync.Once
	err        error

	leaseExpires                                                                    atomic.Int64
	relayed, caughtUp, dispatched, batches, historyLost, redisRetries, fenced, term atomic.Int64
	leader                                                                          atomic.Bool
}

// New returns a Dispatcher that relays the outbox of db into rdb. A nil cfg
// means all defaults; an invalid one is an error naming the field.
func New(db lungo.IDatabase, rdb redis.UniversalClient, cfg *Config, logger *zap.Logger) (*Dispatcher, error) {
	if db == nil {
		return nil, errors.New("dispatcher needs a MongoDB database, got nil")
	}
	if rdb == nil {
		return nil, errors.New("dispatcher needs a Redis client, got nil")
	}
	c := cfg.withDefaults()
	if err := c.validate(); err != nil {
		return nil, fmt.Errorf("invalid dispatcher config: %w", err)
	}
	m, err := newMetrics(c.Registerer, c.Stream)
	if err != nil {
		return nil, fmt.Errorf("error registering dispatcher metrics: %w", err)
	}
	if logger == nil {
		logger = zap.NewNop()
	}
	return &Dispatcher{
		db:      db,
		outbox:  db.Collection(outbox.OutboxCollection),
		state:   db.Collection(outbox.DispatcherCollection),
		rdb:     rdb,
		cfg:     c,
		logger:  logger.Named("dispatcher").With(zap.String("stream", c.Stream), zap.String("owner", c.Owner)),
		metrics: m,
		stopped: make(chan struct{}),
	}, nil
}

// Config returns the configuration in effect, defaults applied.
func (d *Dispatcher) Config() Config { return *d.cfg }

// Start checks that Redis and MongoDB answer, then runs the dispatcher in
// the background until Stop is called or ctx is cancelled (which stops it
// like Stop, without waiting). A Dispatcher starts once.
func (d *Dispatcher) Start(ctx context.Context) error {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.started {
		return ErrAlreadyStarted
	}
	if err := d.rdb.Ping(ctx).Err(); err != nil {
		return fmt.Errorf("error reaching Redis: %w", err)
	}
	if err := d.db.Client().Ping(ctx, readpref.Primary()); err != nil {
		return fmt.Errorf("error reaching MongoDB: %w", err)
	}
	d.started = true
	runCtx, cancelRun := context.WithCancel(ctx)
	hardCtx, cancelHard := context.WithCancel(context.WithoutCancel(ctx))
	d.cancelRun, d.cancelHard = cancelRun, cancelHard
	go d.run(runCtx, hardCtx)
	return nil
}

// Stop stops reading, lets the batch in flight finish (XADD, dispatchedAt,
// checkpoint), releases the lease and returns. When ctx ends first, work in
// flight is abandoned (its entries stay undispatched and are relayed again
// later). Stop is idempotent and safe before Start.
func (d *Dispatcher) Stop(ctx context.Context) {
	d.mu.Lock()
	if d.cancelRun == nil { // never started: it never will be
		d.started = true
		d.stopOnce.Do(func() { close(d.stopped) })
		d.mu.Unlock()
		return
	}
	d.mu.Unlock()
	d.cancelRun()
	select {
	case <-d.stopped:
		return
	case <-ctx.Done():
	}
	d.cancelHard()
	<-d.stopped
}

// Stopped is closed once the dispatcher has stopped, after Stop or after a
// fault point fired.
func (d *Dispatcher) Stopped() <-chan struct{} { return d.stopped }

// Err returns the error that stopped the dispatcher abruptly (a fault
// point), or nil.
func (d *Dispatcher) Err() error {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.err
}

// Stats returns the dispatcher's counts.
func (d *Dispatcher) Stats() Stats {
	return Stats{
		Relayed:      d.relayed.Load(),
		CaughtUp:     d.caughtUp.Load(),
		Dispatched:   d.dispatched.Load(),
		Batches:      d.batches.Load(),
		HistoryLost:  d.historyLost.Load(),
		RedisRetries: d.redisRetries.Load(),
		Fenced:       d.fenced.Load(),
		Leader:       d.leader.Load(),
		Term:         d.term.Load(),
	}
}

// run alternates between standby and leadership until ctx ends.
func (d *Dispatcher) run(ctx, hardCtx context.Context) {
	defer func() {
		d.cancelHard()
		d.stopOnce.Do(func() { close(d.stopped) })
	}()
	d.logger.Debug("Dispatcher started")
	defer d.logger.Debug("Dispatcher stopped")
	bo := d.newBackoff()
	standby := false
	for ctx.Err() == nil {
		term, err := d.acquire(ctx)
		if err != nil {
			if ctx.Err() == nil {
				d.logger.Warn("Error taking the lease; retrying", zap.Error(err))
				sleep(ctx, bo.NextBackOff())
			}
			continue
		}
		if term == 0 {
			if !standby {
				d.logger.Info("Standing by: another dispatcher holds the lease")
				standby = true
			}
			sleep(ctx, d.leaseInterval())
			continue
		}
		standby = false
		began := time.Now()
		err = d.lead(ctx, hardCtx, term)
		switch {
		case errors.Is(err, fault.ErrInjected):
			d.mu.Lock()
			d.err = err
			d.mu.Unlock()
			d.logger.Warn("Stopped abruptly at a fault point", zap.Int64("term", term), zap.Error(err))
			return
		case ctx.Err() != nil:
			d.release(hardCtx, term)
			return
		case errors.Is(err, ErrFenced), errors.Is(err, errLeaseExpired):
			d.fenced.Add(1)
			d.metrics.fenced.Inc()
			d.logger.Warn("Lost the lease; standing by", zap.Int64("term", term), zap.Error(err))
			sleep(ctx, d.leaseInterval())
		default:
			d.logger.Error("Dispatcher failed; retrying", zap.Int64("term", term), zap.Error(err))
			if time.Since(began) > d.cfg.LeaseTTL {
				bo.Reset()
			}
			sleep(ctx, bo.NextBackOff())
		}
	}
}

// lead relays while this dispatcher holds the lease of term. It returns the
// reason the leadership ended.
func (d *Dispatcher) lead(ctx, hardCtx context.Context, term int64) error {
	d.term.Store(term)
	d.leader.Store(true)
	d.metrics.term.Set(float64(term))
	d.metrics.leader.Set(1)
	defer func() {
		d.leader.Store(false)
		d.metrics.leader.Set(0)
	}()
	d.logger.Info("Took the lease", zap.Int64("term", term))

	leadCtx, cancel := context.WithCancelCause(ctx)
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		d.keepLease(leadCtx, term, cancel)
	}()
	err := d.follow(leadCtx, hardCtx, term)
	cause := context.Cause(leadCtx)
	cancel(nil)
	wg.Wait()
	if ctx.Err() == nil && (errors.Is(cause, ErrFenced) || errors.Is(cause, errLeaseExpired)) && !errors.Is(err, fault.ErrInjected) {
		return cause
	}
	return err
}

// follow opens the change stream, catches up from the outbox and relays the
// stream, reopening it after a lost position or a failure. It returns on
// stop, on a lost lease and on a fault point.
func (d *Dispatcher) follow(ctx, hardCtx context.Context, term int64) error {
	bo := d.newBackoff()
	var lost error // set when the previous stream fell off the oplog
	for {
		err := d.session(ctx, hardCtx, term, lost)
		lost = nil
		switch {
		case ctx.Err() != nil, errors.Is(err, ErrFenced), errors.Is(err, fault.ErrInjected):
			return err
		case mongodb.IsHistoryLost(err), errors.Is(err, errPositionLost):
			lost = err // reopen from now at once: waiting does not bring it back
		default:
			wait := bo.NextBackOff()
			d.logger.Warn("Relaying failed; reopening the change stream", zap.Duration("wait", wait), zap.Error(err))
			if err := sleep(ctx, wait); err != nil {
				return err
			}
		}
	}
}

// session is one change stream's life: open it (from the saved token unless
// lost says the position is gone), catch up, then relay what it delivers.
func (d *Dispatcher) session(ctx, hardCtx context.Context, term int64, lost error) error {
	var token bson.Raw
	if lost == nil {
		st, err := d.readState(ctx)
		if err != nil {
			return err
		}
		token = st.ResumeToken
		if st.resumeTokenInvalid {
			lost = errors.New("saved resume token is not a document")
		}
	}
	cs, err := d.open(ctx, token)
	if err != nil && token != nil && ctx.Err() == nil && !mongodb.IsUnavailable(err) {
		// Out of the oplog, or corrupt: either way it will never work again.
		lost = err
		cs, err = d.open(ctx, nil)
	}
	if err != nil {
		return err
	}
	defer cs.Close(context.WithoutCancel(ctx))
	if lost != nil {
		d.historyLost.Add(1)
		d.metrics.historyLost.Inc()
		// Forget the dead token at once, so that a failure during the
		// catch-up does not find it, and count it, again. Starting from
		// now is safe: every start catches up from the outbox.
		if err := d.checkpoint(hardCtx, term, nil, true); err != nil {
			return err
		}
	}

	n, seen, err := d.catchUp(ctx, hardCtx, term)
	if err != nil {
		return err
	}
	if lost != nil {
		d.logger.Warn("Change stream position lost; caught up from the outbox and reopened from now",
			zap.Int64("history_lost_total", d.historyLost.Load()), zap.Int("caught_up", n), zap.NamedError("cause", lost))
	} else if n > 0 {
		d.logger.Info("Caught up from the outbox", zap.Int("caught_up", n))
	}
	if err := d.checkpoint(hardCtx, term, cs.ResumeToken(), false); err != nil {
		return err
	}
	return d.relayStream(ctx, hardCtx, term, cs, seen, token != nil && lost == nil)
}

// readState returns the stream's state document (it exists: acquire
// created it).
func (d *Dispatcher) readState(ctx context.Context) (*State, error) {
	st, err := ReadState(ctx, d.db, d.cfg.Stream)
	if err != nil {
		return nil, err
	}
	if st == nil {
		return &State{}, nil
	}
	return st, nil
}

// open watches the outbox collection from token, or from now when nil. The
// pipeline is empty on purpose: the embedded engine panics on any other, so
// events are filtered in Go on both engines.
func (d *Dispatcher) open(ctx context.Context, token bson.Raw) (lungo.IChangeStream, error) {
	opts := options.ChangeStream().SetMaxAwaitTime(d.cfg.PollInterval).SetBatchSize(int32(d.cfg.BatchSize))
	if token != nil {
		opts.SetResumeAfter(token)
	}
	cs, err := d.outbox.Watch(ctx, mongo.Pipeline{}, opts)
	if err != nil {
		return nil, fmt.Errorf("error opening the change stream on %s: %w", outbox.OutboxCollection, err)
	}
	return cs, nil
}

// catchUp relays every undispatched outbox entry of the stream, oldest
// first, and returns how many it relayed and their ids, so the change
// stream opened before it does not relay them a second time.
func (d *Dispatcher) catchUp(ctx, hardCtx context.Context, term int64) (int, map[primitive.ObjectID]struct{}, error) {
	seen := map[primitive.ObjectID]struct{}{}
	var after primitive.ObjectID
	n := 0
	for {
		cur, err := d.outbox.Find(ctx,
			bson.D{{Key: "_id", Value: bson.M{"$gt": after}}, {Key: "dispatchedAt", Value: nil}, {Key: "stream", Value: d.cfg.Stream}},
			options.Find().SetSort(bson.D{{Key: "_id", Value: 1}}).SetLimit(int64(d.cfg.BatchSize)))
		if err != nil {
			return n, nil, fmt.Errorf("error reading undispatched outbox entries: %w", err)
		}
		var entries []outbox.Entry
		if err := cur.All(ctx, &entries); err != nil {
			return n, nil, fmt.Errorf("error reading undispatched outbox entries: %w", err)
		}
		if len(entries) == 0 {
			return n, seen, nil
		}
		if err := d.relay(ctx, hardCtx, term, entries, nil); err != nil {
			return n, nil, err
		}
		for _, e := range entries {
			seen[e.ID] = struct{}{}
		}
		n += len(entries)
		d.caughtUp.Add(int64(len(entries)))
		after = entries[len(entries)-1].ID
		if len(entries) < d.cfg.BatchSize {
			return n, seen, nil
		}
	}
}

// changeEvent is the part of a change event the dispatcher reads.
type changeEvent struct {
	OperationType string   `bson:"operationType"`
	FullDocument  bson.Raw `bson:"fullDocument"`
}

// relayStream relays what the change stream delivers, in batches, and
// checkpoints while idle, until ctx ends or something fails.
func (d *Dispatcher) relayStream(ctx, hardCtx context.Context, term int64, cs lungo.IChangeStream, seen map[primitive.ObjectID]struct{}, resumed bool) error {
	var batch []outbox.Entry
	delivered := false
	lastCheckpoint := time.Now()
	for {
		if err := ctx.Err(); err != nil {
			return err // a batch not yet sent stays undispatched: relayed next time
		}
		if cs.TryNext(ctx) {
			delivered = true
			e, ok := d.accept(cs)
			if ok {
				if _, dup := seen[e.ID]; dup {
					delete(seen, e.ID)
				} else {
					batch = append(batch, e)
				}
			}
			if len(batch) >= d.cfg.BatchSize {
				if err := d.relay(ctx, hardCtx, term, batch, cs.ResumeToken()); err != nil {
					return err
				}
				batch, lastCheckpoint = nil, time.Now()
			}
			continue
		}
		if err := cs.Err(); err != nil {
			if ctx.Err() != nil {
				return ctx.Err()
			}
			if resumed && !delivered && !mongodb.IsUnavailable(err) {
				// A server may accept a resume token and fail on the first
				// getMore: the saved position is unusable.
				return fmt.Errorf("%w: %w", errPositionLost, err)
			}
			return fmt.Errorf("error reading the change stream: %w", err)
		}
		if len(batch) > 0 {
			if err := d.relay(ctx, hardCtx, term, batch, cs.ResumeToken()); err != nil {
				return err
			}
			batch, lastCheckpoint = nil, time.Now()
			continue
		}
		if time.Since(lastCheckpoint) >= d.cfg.IdleCheckpoint {
			if err := d.checkpoint(hardCtx, term, cs.ResumeToken(), false); err != nil {
				return err
			}
			lastCheckpoint = time.Now()
		}
		if err := sleep(ctx, d.cfg.PollInterval); err != nil {
			return err
		}
	}
}

// accept returns the outbox entry of the current change event when it is
// an insert of an undispatched entry of this stream.
func (d *Dispatcher) accept(cs lungo.IChangeStream) (outbox.Entry, bool) {
	var ev changeEvent
	var e outbox.Entry
	if err := cs.Decode(&ev); err != nil {
		d.logger.Error("Undecodable change event skipped; catch-up relays its entry", zap.Error(err))
		return e, false
	}
	if ev.OperationType != "insert" || ev.FullDocument == nil {
		return e, false
	}
	if err := bson.Unmarshal(ev.FullDocument, &e); err != nil {
		d.logger.Error("Undecodable outbox entry skipped", zap.Error(err))
		return e, false
	}
	return e, e.Stream == d.cfg.Stream && e.DispatchedAt == nil
}

// relay moves one batch: XADD (retried until Redis answers or the
// dispatcher stops), then dispatchedAt, then the checkpoint (token nil:
// checkpointAt only). Nothing is marked or checkpointed unless the XADD
// succeeded. Once the XADD went through, the rest runs on hardCtx so that a
// stop request lets the batch finish.
func (d *Dispatcher) relay(ctx, hardCtx context.Context, term int64, entries []outbox.Entry, token bson.Raw) error {
	if err := d.xadd(ctx, hardCtx, entries); err != nil {
		return err
	}
	d.relayed.Add(int64(len(entries)))
	d.metrics.relayed.Add(float64(len(entries)))
	if err := d.cfg.Faults.Check(FaultAfterXAdd); err != nil {
		return err
	}
	_, err := d.outbox.UpdateMany(hardCtx, markFilter(entries),
		bson.M{"$set": bson.M{"dispatchedAt": d.cfg.Clock.Now().UTC()}})
	if err != nil {
		return fmt.Errorf("error marking %d outbox entries dispatched: %w", len(entries), err)
	}
	if err := d.cfg.Faults.Check(FaultAfterMark); err != nil {
		return err
	}
	d.dispatched.Add(int64(len(entries)))
	d.batches.Add(1)
	d.metrics.batches.Inc()
	return d.checkpoint(hardCtx, term, token, false)
}

// markFilter selects exactly the batch's entries that are still
// undispatched.
func markFilter(entries []outbox.Entry) bson.D {
	ids := make([]primitive.ObjectID, len(entries))
	for i, e := range entries {
		ids[i] = e.ID
	}
	return bson.D{{Key: "_id", Value: mongodb.IDsIn(ids)}, {Key: "dispatchedAt", Value: nil}}
}

// xadd adds entries to the stream in one pipeline, retrying with jittered
// back-off while Redis fails, until ctx ends. Each attempt runs on hardCtx
// so that a stop request does not cut a pipeline in half.
func (d *Dispatcher) xadd(ctx, hardCtx context.Context, entries []outbox.Entry) error {
	attempts := 0
	err := backoff.RetryNotify(func() error {
		_, err := d.rdb.Pipelined(hardCtx, func(p redis.Pipeliner) error {
			for _, e := range entries {
				p.XAdd(hardCtx, &redis.XAddArgs{
					Stream: d.cfg.Stream, MaxLen: d.cfg.MaxStreamLen, Approx: d.cfg.MaxStreamLen > 0,
					Values: []any{outbox.PayloadField, e.Message},
				})
			}
			return nil
		})
		if err != nil {
			return fmt.Errorf("error adding %d entries to the stream: %w", len(entries), err)
		}
		return nil
	}, backoff.WithContext(d.newBackoff(), ctx), func(err error, wait time.Duration) {
		attempts++
		d.redisRetries.Add(1)
		d.metrics.redisRetries.Inc()
		if attempts == 1 || attempts%10 == 0 {
			d.logger.Warn("Redis unavailable; holding the checkpoint and retrying",
				zap.Int("attempts", attempts), zap.Duration("wait", wait), zap.Error(err))
		}
	})
	if err == nil && attempts > 0 {
		d.logger.Info("Redis is back; relaying again", zap.Int("attempts", attempts))
	}
	return err
}

func (d *Dispatcher) newBackoff() *backoff.ExponentialBackOff {
	b := backoff.NewExponentialBackOff()
	b.InitialInterval = min(100*time.Millisecond, d.cfg.BackoffMax)
	b.MaxInterval = d.cfg.BackoffMax
	b.MaxElapsedTime = 0
	b.Reset()
	return b
}

// sleep waits for d or until ctx ends, and returns ctx.Err().
func sleep(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}
