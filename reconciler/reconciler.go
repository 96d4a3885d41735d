package reconciler

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/256dpi/lungo"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"
	"go.mongodb.org/mongo-driver/bson"
	"go.mongodb.org/mongo-driver/bson/primitive"
	"go.mongodb.org/mongo-driver/mongo"
	"go.mongodb.org/mongo-driver/mongo/options"
	"go.uber.org/zap"

	"github.com/outboxd/outboxd/internal/clock"
	"github.com/outboxd/outboxd/internal/fault"
	"github.com/outboxd/outboxd/internal/mongodb"
	"github.com/outboxd/outboxd/outbox"
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
)

// Fault points (tests only).
const (
	// FaultAfterClaim fires after a document is claimed and before it is
	// published, and ends the sweep as a crash would: the claim stays, so
	// the document is a candidate again only after RequeueAfter.
	FaultAfterClaim = "reconciler.after-claim"
	// FaultRollback makes the rollback of a failed publish fail, as a
	// MongoDB error would.
	FaultRollback = "reconciler.rollback"
)

// rollbackTimeout bounds a rollback, which runs even when the sweep's
// context was cancelled.
const rollbackTimeout = 10 * time.Second

// Config configures a Reconciler. A nil config means all defaults.
type Config struct {
	// Stream is the stream the originals' messages are added to, the one
	// the dispatcher feeds. Defaults to outbox.StreamDefault.
	Stream string
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
	// Clock tells the time for ages, thresholds and claim stamps. Defaults
	// to the system clock.
	Clock clock.Clock
	// Faults arms fault points in tests. Defaults to none.
	Faults *fault.Set
	// Registerer receives the reconciler's metrics. Defaults to none (the
	// metrics are kept but not exported).
	Registerer prometheus.Registerer
}

func (c *Config) withDefaults() *Config {
	if c == nil {
		c = &Config{}
	}
	return &Config{
		Stream:       cmp.Or(c.Stream, outbox.StreamDefault),
		MinAge:       cmp.Or(c.MinAge, MinAgeDefault),
		RequeueAfter: cmp.Or(c.RequeueAfter, RequeueAfterDefault),
		Limit:        cmp.Or(c.Limit, LimitDefault),
		Clock:        cmp.Or[clock.Clock](c.Clock, clock.System),
		Faults:       c.Faults,
		Registerer:   c.Registerer,
	}
}

func (c *Config) validate() error {
	switch {
	case c.MinAge < 0:
		return fmt.Errorf("reconciler: MinAge must not be negative, got %s", c.MinAge)
	case c.RequeueAfter < 0:
		// A claim must hold for some time, or concurrent runs would both
		// claim the same document.
		return fmt.Errorf("reconciler: RequeueAfter must be positive, got %s", c.RequeueAfter)
	case c.RequeueAfter < time.Millisecond:
		return fmt.Errorf("reconciler: RequeueAfter must be at least 1ms (MongoDB's date precision), got %s", c.RequeueAfter)
	case c.Limit < 0:
		return fmt.Errorf("reconciler: Limit must be positive, got %d", c.Limit)
	}
	return nil
}

// Reconciler re-publishes originals that never reached syncedAt. See the
// package documentation for one sweep's steps.
type Reconciler struct {
	events       lungo.ICollection
	rdb          redis.UniversalClient
	stream       string
	minAge       time.Duration
	requeueAfter time.Duration
	limit        int
	clock        clock.Clock
	faults       *fault.Set
	logger       *zap.Logger
	metrics      *metrics

	// testHookBeforeRollback runs after a failed publish, before its
	// rollback (tests only).
	testHookBeforeRollback func(id primitive.ObjectID)
}

// New returns a Reconciler for the originals in db that publishes to rdb.
// A nil cfg means all defaults; an invalid one is an error naming the field.
func New(db lungo.IDatabase, rdb redis.UniversalClient, cfg *Config, logger *zap.Logger) (*Reconciler, error) {
	if db == nil || rdb == nil {
		return nil, errors.New("reconciler: a MongoDB database and a Redis client are required")
	}
	cfg = cfg.withDefaults()
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	if logger == nil {
		logger = zap.NewNop()
	}
	m, err := newMetrics(cfg.Registerer, cfg.Stream)
	if err != nil {
		return nil, fmt.Errorf("reconciler: error registering metrics: %w", err)
	}
	return &Reconciler{
		events:       db.Collection(outbox.EventsCollection),
		rdb:          rdb,
		stream:       cfg.Stream,
		minAge:       cfg.MinAge,
		requeueAfter: cfg.RequeueAfter,
		limit:        cfg.Limit,
		clock:        cfg.Clock,
		faults:       cfg.Faults,
		logger:       logger.Named("reconciler").With(zap.String("stream", cfg.Stream)),
		metrics:      m,
	}, nil
}

// now returns the clock's time at MongoDB's precision, so a stamp written
// to a document compares equal when it is used in a filter.
func (r *Reconciler) now() time.Time { return r.clock.Now().UTC().Truncate(time.Millisecond) }

// requeueEligible matches documents never claimed, or claimed before
// threshold. {lastRequeuedAt: null} matches a missing field too.
func requeueEligible(threshold time.Time) bson.E {
	return bson.E{Key: "$or", Value: bson.A{
		bson.D{{Key: "lastRequeuedAt", Value: nil}},
		bson.D{{Key: "lastRequeuedAt", Value: bson.D{{Key: "$lt", Value: threshold}}}},
	}}
}

// CandidateFilter returns the query of one sweep at now: unsynced, not
// parked, created before now-minAge, and never claimed or claimed before
// now-requeueAfter. Sort by createdAt ascending. It is exported so that
// tests and tools can explain it against the reconciler index.
func CandidateFilter(now time.Time, minAge, requeueAfter time.Duration) bson.D {
	return append(outbox.PendingFilter(),
		bson.E{Key: "createdAt", Value: bson.D{{Key: "$lt", Value: now.Add(-minAge)}}},
		requeueEligible(now.Add(-requeueAfter)),
	)
}

// CandidateSort is the order of candidates: oldest first.
var CandidateSort = bson.D{{Key: "createdAt", Value: 1}}

// Sweep runs one sweep and reports what it did. Per-document failures are
// counted in the report (see Report.Failed); the error is for failures of
// the sweep itself: the candidate query, MongoDB becoming unreachable,
// ctx ending, or an injected crash. The report holds what was done until
// then.
func (r *Reconciler) Sweep(ctx context.Context) (rep Report, err error) {
	began := time.Now()
	now := r.now()
	rep = Report{Stream: r.stream, StartedAt: now}
	defer func() {
		rep.Duration = time.Since(began)
		r.metrics.observe(&rep, err)
	}()

	ids, err := r.candidates(ctx, now)
	if err != nil {
		return rep, err
	}
	rep.Scanned = len(ids)
	rep.LimitReached = len(ids) == r.limit
	for _, id := range ids {
		if err := ctx.Err(); err != nil {
			return rep, err
		}
		if err := r.reconcile(ctx, id, &rep); err != nil {
			return rep, err
		}
	}
	if err := r.measure(ctx, now, &rep); err != nil {
		return rep, err
	}
	return rep, nil
}

// candidates returns the ids of this sweep's candidates, oldest first.
func (r *Reconciler) candidates(ctx context.Context, now time.Time) ([]primitive.ObjectID, error) {
	cur, err := r.events.Find(ctx, CandidateFilter(now, r.minAge, r.requeueAfter), options.Find().
		SetSort(CandidateSort).
		SetLimit(int64(r.limit)).
		SetProjection(bson.D{{Key: "_id", Value: 1}}))
	if err != nil {
		return nil, fmt.Errorf("error querying reconciler candidates: %w", err)
	}
	var docs []struct {
		ID primitive.ObjectID `bson:"_id"`
	}
	if err := cur.All(ctx, &docs); err != nil {
		return nil, fmt.Errorf("error reading reconciler candidates: %w", err)
	}
	ids := make([]primitive.ObjectID, len(docs))
	for i, d := range docs {
		ids[i] = d.ID
	}
	return ids, nil
}

// reconcile claims, publishes and, when publishing fails, rolls back one
// document, counting the outcome in rep. It returns an error only when the
// sweep must stop.
func (r *Reconciler) reconcile(ctx context.Context, id primitive.ObjectID, rep *Report) error {
	logger := r.logger.With(zap.String("event_id", id.Hex()))
	attemptedAt := r.now()
	ev, err := r.claim(ctx, id, attemptedAt)
	switch {
	case errors.Is(err, errNotClaimed):
		rep.Skipped++
		return nil
	case err != nil && (ctx.Err() != nil || mongodb.IsUnavailable(err)):
		return err
	case err != nil:
		rep.ClaimFailed++
		logger.Warn("error claiming event", zap.Error(err))
		return nil
	}
	rep.Claimed++

	if err := r.faults.Check(FaultAfterClaim); err != nil {
		return err
	}

	err = r.rdb.XAdd(ctx, &redis.XAddArgs{Stream: r.stream, Values: ev.Message(outbox.OriginReconciler).Values()}).Err()
	if err == nil {
		rep.Published++
		return nil
	}
	rep.PublishFailed++
	logger.Warn("error publishing event, rolling back its claim", zap.Error(err))

	if r.testHookBeforeRollback != nil {
		r.testHookBeforeRollback(id)
	}
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), rollbackTimeout)
	defer cancel()
	restored, rerr := r.rollback(rctx, id, attemptedAt, ev.LastRequeuedAt)
	switch {
	case rerr != nil:
		rep.RollbackFailed++
		logger.Error("error rolling back claim; the event is a candidate again after requeue-after",
			zap.Duration("requeue_after", r.requeueAfter), zap.Error(rerr))
	case restored:
		rep.RolledBack++
	default:
		rep.RollbackSkipped++
		logger.Info("claim not rolled back: a newer claim owns the event")
	}
	return ctx.Err()
}

// errNotClaimed means the document no longer matched the claim conditions.
var errNotClaimed = errors.New("event not claimed")

// claim stamps the document with attemptedAt and increments its
// requeueCount while it is still a candidate (unsynced, not parked, not
// claimed since attemptedAt-RequeueAfter), and returns the document as it
// was before the claim, without its payload. It returns errNotClaimed when
// the document no longer matches, for example because another run claimed
// it first.
func (r *Reconciler) claim(ctx context.Context, id primitive.ObjectID, attemptedAt time.Time) (*outbox.Event, error) {
	filter := append(bson.D{{Key: "_id", Value: id}}, outbox.PendingFilter()...)
	filter = append(filter, requeueEligible(attemptedAt.Add(-r.requeueAfter)))
	update := bson.D{
		{Key: "$set", Value: bson.D{{Key: "lastRequeuedAt", Value: attemptedAt}}},
		{Key: "$inc", Value: bson.D{{Key: "requeueCount", Value: int64(1)}}},
	}
	var ev outbox.Event
	err := r.events.FindOneAndUpdate(ctx, filter, update, options.FindOneAndUpdate().
		SetReturnDocument(options.Before).
		SetProjection(bson.D{{Key: "payload", Value: 0}})).Decode(&ev)
	if errors.Is(err, mongo.ErrNoDocuments) {
		return nil, errNotClaimed
	}
	if err != nil {
		return nil, fmt.Errorf("error claiming event %s: %w", id.Hex(), err)
	}
	return &ev, nil
}

// rollback undoes this run's claim on id after a failed publish, only
// while lastRequeuedAt still equals attemptedAt (the run's ownership
// token): a newer claim by another run is left alone. It restores the
// value the claim replaced (prev; null when there was none), so the
// document is a candidate again at the next sweep instead of after
// RequeueAfter, and decrements requeueCount, since nothing was requeued.
// It reports whether it restored the document.
func (r *Reconciler) rollback(ctx context.Context, id primitive.ObjectID, attemptedAt time.Time, prev *time.Time) (bool, error) {
	if err := r.faults.Check(FaultRollback); err != nil {
		return false, err
	}
	res, err := r.events.UpdateOne(ctx,
		bson.D{{Key: "_id", Value: id}, {Key: "lastRequeuedAt", Value: attemptedAt}},
		bson.D{
			{Key: "$set", Value: bson.D{{Key: "lastRequeuedAt", Value: prev}}},
			{Key: "$inc", Value: bson.D{{Key: "requeueCount", Value: int64(-1)}}},
		})
	if err != nil {
		return false, fmt.Errorf("error rolling back the claim on event %s: %w", id.Hex(), err)
	}
	return res.MatchedCount == 1, nil
}

// measure fills the state part of rep: the age of the oldest unsynced,
// unparked original (claimed or not) and the parked originals by
// category.
func (r *Reconciler) measure(ctx context.Context, now time.Time, rep *Report) error {
	oldest, ok, err := outbox.OldestPending(ctx, r.events.Database())
	if err != nil {
		return fmt.Errorf("error finding the oldest unsynced event: %w", err)
	}
	if ok {
		rep.OldestUnsyncedAge = max(now.Sub(oldest), 0)
	}

	// Parked originals are unsynced ones with a syncFailure. The embedded
	// engine has no aggregation, so count per known category and put the
	// rest under CategoryOther.
	parked, err := r.events.CountDocuments(ctx, bson.D{
		{Key: "syncedAt", Value: nil},
		{Key: "syncFailure", Value: bson.D{{Key: "$ne", Value: nil}}},
	})
	if err != nil {
		return fmt.Errorf("error counting parked events: %w", err)
	}
	rep.Failures = make(map[string]int64, len(knownCategories)+1)
	var known int64
	for _, cat := range knownCategories {
		n, err := r.events.CountDocuments(ctx, bson.D{
			{Key: "syncedAt", Value: nil},
			{Key: "syncFailure.category", Value: cat},
		})
		if err != nil {
			return fmt.Errorf("error counting parked events of category %s: %w", cat, err)
		}
		rep.Failures[cat] = n
		known += n
	}
	if other := parked - known; other > 0 {
		rep.Failures[CategoryOther] = other
	}
	return nil
}

// CategoryOther counts, in Report.Failures, parked originals whose
// syncFailure category is none of the known ones.
const CategoryOther = "other"

var knownCategories = []string{outbox.CategoryNonRetryable, outbox.CategoryPoison}

// Run sweeps now and then every interval until ctx ends, logging each
// report (at Info only when the sweep did work). It returns nil when ctx
// ends; per-sweep errors are logged, not returned, so one bad sweep does
// not stop the schedule.
func (r *Reconciler) Run(ctx context.Context, every time.Duration) error {
	if every <= 0 {
		return fmt.Errorf("reconciler: every must be positive, got %s", every)
	}
	r.logger.Debug("reconciler started", zap.Duration("every", every))
	defer r.logger.Debug("reconciler stopped")
	ticker := time.NewTicker(every)
	defer ticker.Stop()
	for {
		r.sweepAndLog(ctx)
		select {
		case <-ctx.Done():
			return nil
		case <-ticker.C:
		}
	}
}

func (r *Reconciler) sweepAndLog(ctx context.Context) {
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
}
