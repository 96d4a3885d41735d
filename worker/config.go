package worker

import (
	"cmp"
	"errors"
	"fmt"
	"math"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"golang.org/x/time/rate"

	"github.com/outboxd/outboxd/internal/bounds"
	"github.com/outboxd/outboxd/internal/failpolicy"
	"github.com/outboxd/outboxd/internal/fault"
	"github.com/outboxd/outboxd/internal/instance"
	"github.com/outboxd/outboxd/internal/readmodel"
	"github.com/outboxd/outboxd/internal/stream"
	"github.com/outboxd/outboxd/outbox"
	"github.com/outboxd/outboxd/store"
)

// Defaults of Config.
const (
	// BatchSizeDefault is the default Config.BatchSize.
	BatchSizeDefault = 2000
	// BlockDefault is the default Config.Block.
	BlockDefault = 2 * time.Second
	// ClaimIdleDefault is the default Config.ClaimIdle.
	ClaimIdleDefault = 30 * time.Second
	// ClaimIdleShortest is the shortest Config.ClaimIdle (and
	// --claim-idle).
	ClaimIdleShortest = time.Millisecond
	// ClaimIntervalMax caps the default Config.ClaimInterval.
	ClaimIntervalMax = 15 * time.Second
	// MaxDeliveriesDefault is the default Config.MaxDeliveries.
	MaxDeliveriesDefault = 3
	// TxAttemptsDefault is the default Config.TxAttempts.
	TxAttemptsDefault = 5
	// BackoffMaxDefault is the default Config.BackoffMax.
	BackoffMaxDefault = 10 * time.Second
	// RecordBackoffDefault is the default Config.RecordBackoff.
	RecordBackoffDefault = time.Second
	// BreakerFailuresDefault is the default Config.BreakerFailures.
	BreakerFailuresDefault = failpolicy.BreakerFailuresDefault
	// BreakerTimeoutDefault is the default Config.BreakerTimeout.
	BreakerTimeoutDefault = failpolicy.BreakerTimeoutDefault
	// StreakLimitDefault is the default Config.StreakLimit.
	StreakLimitDefault = failpolicy.StreakLimitDefault
	// ConsumerExpiryDefault is the default Config.ConsumerExpiry.
	ConsumerExpiryDefault = 24 * time.Hour
	// ReplayRateDefault is the default Config.ReplayRate, in events per
	// second.
	ReplayRateDefault rate.Limit = 5000
	// ProjectionTargetDefault is the default Config.ProjectionTarget (seed
	// 002: one transaction in 1 to 5 seconds).
	ProjectionTargetDefault = time.Second
	// LockTimeoutDefault is the default Config.LockTimeout.
	LockTimeoutDefault = 5 * time.Second
	// StatementTimeoutDefault is the default Config.StatementTimeout.
	StatementTimeoutDefault = 30 * time.Second
	// LeaseTTLDefault is the default Config.LeaseTTL.
	LeaseTTLDefault = 15 * time.Second
	// TailGatherDefault is the default Config.TailGather.
	TailGatherDefault = 5 * time.Millisecond
)

// TimeoutOff is the Config.LockTimeout or Config.StatementTimeout that
// leaves that PostgreSQL setting as the server or the role has it.
const TimeoutOff time.Duration = -1

// Bounds checked by Validate.
const (
	// BatchSizeMax is the largest accepted Config.BatchSize.
	BatchSizeMax = 10_000
	// BlockMax is the longest accepted Config.Block: a stop request waits
	// for the read in progress.
	BlockMax = time.Minute
	// RecordBackoffMax caps the pause before a failing record's next
	// delivery, however many deliveries Config.MaxDeliveries allows.
	RecordBackoffMax = 5 * time.Minute
	// AutoBatchMin and AutoBatchMax bound the batch size that
	// Config.AutoBatch chooses (500 to 2,000).
	AutoBatchMin = 500
	AutoBatchMax = 2000
	// ProjectionTargetShortest and ProjectionTargetLongest bound
	// Config.ProjectionTarget.
	ProjectionTargetShortest = 10 * time.Millisecond
	ProjectionTargetLongest  = time.Minute
	// LeaseTTLShortest is the shortest accepted Config.LeaseTTL.
	LeaseTTLShortest = 30 * time.Millisecond
	// TailGatherMax is the longest accepted Config.TailGather.
	TailGatherMax = time.Second
)

// Config configures a Worker. A nil config means all defaults.
type Config struct {
	// Stream is the stream to consume. Defaults to outbox.StreamDefault.
	Stream string
	// Group is the consumer group. Defaults to stream.GroupDefault.
	Group string
	// Partitions is the stream's number of partitions (--partitions), and
	// Partition the one this Worker reads (0 ≤ Partition < Partitions):
	// its stream, replay lane, dead-letter stream and budgets are that
	// partition's (stream.Keys.Partition). A process reads every
	// partition with one Worker per partition. Defaults to one partition.
	Partition, Partitions int
	// Ordered (--ordered) makes the Worker project its partition in stream
	// order: it first takes the partition's lease in the store (the lease
	// OrderedLeaseName, renewed every LeaseTTL/3), so that one Worker at a
	// time, in the whole deployment, reads the partition; while it holds
	// the lease it claims every entry pending in the partition (whichever
	// consumer holds it) and projects them in id order before it reads new
	// ones, one batch at a time (no read-ahead), handing the Projector each
	// batch's events in stream order (not event id order). A failing entry
	// holds only the later entries of its message group (its source and
	// device): they are neither projected nor acknowledged until it goes
	// through or, its MaxDeliveries spent, is dead-lettered, while the other
	// devices of the partition go on in order. A Worker that loses the lease abandons
	// its batch in flight (its entries stay pending, for the next owner)
	// and stands by. So a custom Projector sees one device's events in the
	// order they were written, except for a dead letter replayed later and
	// the replay lane (stream.Keys.ReplayLane), which re-projects events
	// already projected and is read as without Ordered. Every Worker of
	// the group must then be Ordered. Defaults to false.
	Ordered bool
	// LeaseTTL is how long an Ordered Worker's partition lease lasts
	// unrenewed: how long a partition waits after its owner died. Defaults
	// to LeaseTTLDefault (15s); at least LeaseTTLShortest.
	LeaseTTL time.Duration
	// Consumer names this worker in the group; give a restarted worker the
	// same name to let it drain its own pending entries first. Defaults to
	// "<hostname>-<pid>", with "-<n>" appended for the second and later
	// Worker of one process.
	Consumer string
	// BatchSize is the COUNT of each XREADGROUP and XAUTOCLAIM, so at most
	// this many entries go into one PostgreSQL transaction. Defaults to
	// BatchSizeDefault (2,000: the fastest of 250, 500, 1,000 and 2,000 in
	// the chunk-size table of docs/benchmarks.md); at most BatchSizeMax.
	BatchSize int
	// Block bounds how long one XREADGROUP waits for new entries, and so how
	// long a stop request or a due reclaim waits. It is never 0 (which would
	// make Redis block forever). Defaults to BlockDefault (2s); at most
	// BlockMax.
	Block time.Duration
	// ClaimIdle is how long an entry must have been pending (delivered, not
	// acknowledged) and untouched before XAUTOCLAIM takes it from its
	// consumer, presumed dead. A live worker touches the entries it holds
	// (a batch paused by an outage, records waiting for their next
	// delivery) every ClaimIdle/4, so only a dead or wedged worker's
	// entries are taken. Defaults to ClaimIdleDefault (30s).
	ClaimIdle time.Duration
	// ClaimInterval is how often the worker runs XAUTOCLAIM. Defaults to
	// half of ClaimIdle, at most ClaimIntervalMax (15s) and at least 1ms.
	ClaimInterval time.Duration
	// MaxDeliveries is how many failed deliveries a record gets before it
	// is dead-lettered and acknowledged: a record whose projection keeps
	// failing is parked as poison (syncFailure set), an entry whose
	// original is missing goes as non_retryable. Only the record's own
	// failures count (kept in the hash stream.Keys.Failures), never
	// an outage and never a hand-over between consumers (Redis's PEL
	// delivery count). Defaults to MaxDeliveriesDefault (3).
	MaxDeliveries int
	// RecordBackoff is the pause before the second delivery of a failing
	// record; it doubles for each further one (with ±25% jitter, at most
	// RecordBackoffMax): about 1s, then 2s by default (the default
	// MaxDeliveries of 3 dead-letters on the third failure, so only two
	// waits happen; 4s and more with a higher MaxDeliveries). Defaults to
	// RecordBackoffDefault (1s).
	RecordBackoff time.Duration
	// TxAttempts is how often a projection transaction runs when it fails
	// with a serialization failure or deadlock (40001, 40P01). Defaults to
	// TxAttemptsDefault (5).
	TxAttempts int
	// BackoffMax caps the jittered exponential backoff after an
	// infrastructure failure (Redis, the store or PostgreSQL unreachable).
	// Defaults to BackoffMaxDefault (10s).
	BackoffMax time.Duration
	// BreakerFailures is how many consecutive infrastructure failures open
	// the circuit around PostgreSQL, and the one around the store.
	// Defaults to BreakerFailuresDefault (5).
	BreakerFailures int
	// BreakerTimeout is how long an open circuit stays open before it lets
	// one probe through; it is also the pause between two attempts while
	// automatic retries are halted (StreakLimit). Defaults to
	// BreakerTimeoutDefault (30s).
	BreakerTimeout time.Duration
	// StreakLimit is how many times in a row one error code may come
	// before the worker halts automatic retries of its class (see
	// Worker.ResumeRetries). Defaults to StreakLimitDefault (50).
	StreakLimit int
	// ConsumerExpiry is how long another consumer of the group must have
	// been idle, with nothing pending, before the worker removes it from
	// the group (XGROUP DELCONSUMER): the names of restarted or scaled-down
	// workers do not pile up. Defaults to ConsumerExpiryDefault (24h).
	ConsumerExpiry time.Duration
	// AutoBatch lets the worker choose its batch size between AutoBatchMin
	// and AutoBatchMax (500 and 2,000) to keep the 95th percentile of its
	// projection transactions under ProjectionTarget (the tuning
	// loop): it starts at BatchSize (within those bounds), shrinks when the
	// p95 of its last projections of full batches is 30% over the target
	// (in proportion, at once after a lock or statement timeout), and grows
	// by a quarter while the p95 would stay under 80% of it.
	// outboxd_worker_batch_size shows the size. Defaults to false: every
	// batch is BatchSize.
	AutoBatch bool
	// TailGather is how long the tail of a batch smaller than the batch
	// size (the syncedAt of its originals, then the XACK of its entries)
	// waits for the tails of the batches after it, so that under a light
	// load the batches of a few milliseconds are marked synced with one
	// store write and acknowledged with one MULTI/EXEC. The order of the
	// writes is kept: every gathered entry's syncedAt is written, then
	// the entries acknowledged. Only batches of the live stream or the
	// replay lane whose every event was projected gather (one with a held
	// entry or a dead letter is written at once, the gathered tails first);
	// a full batch, a pause, a reclaim or a stop writes the gathered tails
	// first. It adds at most this long to an event's syncedAt, and never
	// more than a tenth of ClaimIdle. Not with Ordered. Defaults to
	// TailGatherDefault (5ms); negative: none (each batch's tail written
	// at once); at most TailGatherMax.
	TailGather time.Duration
	// ProjectionTarget is the projection time AutoBatch keeps the p95
	// under; exported as outboxd_worker_projection_target_seconds either
	// way. Defaults to ProjectionTargetDefault (1s); between
	// ProjectionTargetShortest and ProjectionTargetLongest.
	ProjectionTarget time.Duration
	// LockTimeout and StatementTimeout are PostgreSQL's lock_timeout and
	// statement_timeout, set on every projection transaction (SET LOCAL in
	// the transaction's first round trip): a projection waiting for a
	// lock, or running, longer fails, is counted in
	// outboxd_worker_pg_timeouts_total{kind} and retried as an
	// infrastructure failure (never charged to the records). TimeoutOff
	// leaves the server's setting. Default to LockTimeoutDefault (5s) and
	// StatementTimeoutDefault (30s).
	LockTimeout, StatementTimeout time.Duration
	// ReplayRate bounds how many entries per second the worker reads from
	// the replay lane (stream.Keys.Replay), which it reads only when the
	// stream has nothing for it; rate.Inf sets no bound. Defaults to
	// ReplayRateDefault (5,000 events/s). ReplayLimiter, when set, takes
	// its place.
	ReplayRate rate.Limit
	// ProjectionRate bounds the live projection of the whole consumer
	// group (--projection-rate), in events a second: every Worker of the
	// group, in every process and partition, takes its batches' events
	// from one rate kept in Redis (stream.Keys.ProjectionRate, with a
	// burst of a twentieth of a second) and waits before its next batch
	// when the group is ahead of it, so PostgreSQL sees at most that rate
	// from the live path beside ReplayRate's from the replay lane. When
	// Redis cannot be asked, the batch goes on unthrottled. Defaults to 0:
	// no bound.
	ProjectionRate rate.Limit
	// DeadLetterHook is told of each new dead letter once it is written
	// (dlqhook.Hook: a webhook with retries, --dlq-webhook). Defaults to
	// none.
	DeadLetterHook DeadLetterHook
	// ReplayLimiter is the bound of ReplayRate shared by several Workers
	// (NewReplayLimiter): the Workers of one process share one, so that
	// the process reads at most its rate. Defaults to one of the worker's
	// own at ReplayRate.
	ReplayLimiter *rate.Limiter
	// Projector writes batches into PostgreSQL. Defaults to
	// readmodel.NewProjector() (the events table and the daily statistics).
	Projector Projector
	// LeavesSynced makes the worker's group one of several read models on
	// the stream that does not own the originals' state: it projects and
	// acknowledges, but leaves syncedAt and syncFailure to the group that
	// owns them (the one without it). The reconciler re-publishes what the
	// owning group has not completed, so this group's misses are found by
	// its own verify and audit, not swept (docs/projections.md,
	// Several read models). Defaults to false: the group owns them.
	LeavesSynced bool
	// Now stamps syncedAt and syncFailure.at. Defaults to time.Now; tests
	// set a fake clock.
	Now func() time.Time
	// Registerer receives the worker's metrics. Defaults to none (metrics
	// are kept but not exported).
	Registerer prometheus.Registerer

	// faults arms fault points in tests (export_test.go).
	faults *fault.Set
}

// DeadLetterHook is told of each new dead letter (Config.DeadLetterHook);
// Notify must not block. A program implements it with the names below
// (StreamKeys, DeadLetter), which are the worker's own.
type DeadLetterHook interface {
	Notify(keys StreamKeys, dl DeadLetter)
}

// StreamKeys names the Redis keys of the stream a dead letter came from:
// Name (the stream as outbox entries name it), Stream (its Redis key,
// partition and lane included), Group and DLQ (its dead-letter stream).
type StreamKeys = stream.Keys

// DeadLetter is a dead letter as the worker writes it into the
// dead-letter stream: its category, code and error, the entry and the
// original it names, where it was consumed and when.
type DeadLetter = stream.DeadLetter

// names names the instances that name none.
var names = instance.NewNamer("worker")

// withDefaults returns a copy of cfg with every unset field defaulted.
func (c *Config) withDefaults() *Config {
	out := c.defaults()
	if out.Consumer == "" {
		out.Consumer = names.Next()
	}
	if out.ReplayLimiter == nil {
		out.ReplayLimiter = NewReplayLimiter(out.ReplayRate)
	}
	out.Projector = cmp.Or[Projector](out.Projector, readmodel.NewProjector())
	if out.Now == nil {
		out.Now = time.Now
	}
	return out
}

// defaults returns a copy of cfg with every unset bounded field defaulted:
// what Validate checks (it names no consumer and builds nothing).
func (c *Config) defaults() *Config {
	var out Config
	if c != nil {
		out = *c
	}
	out.Stream = cmp.Or(out.Stream, outbox.StreamDefault)
	out.Group = cmp.Or(out.Group, stream.GroupDefault)
	out.BatchSize = cmp.Or(out.BatchSize, BatchSizeDefault)
	out.Block = cmp.Or(out.Block, BlockDefault)
	out.ClaimIdle = cmp.Or(out.ClaimIdle, ClaimIdleDefault)
	out.ClaimInterval = cmp.Or(out.ClaimInterval, max(min(out.ClaimIdle/2, ClaimIntervalMax), time.Millisecond))
	out.MaxDeliveries = cmp.Or(out.MaxDeliveries, MaxDeliveriesDefault)
	out.TxAttempts = cmp.Or(out.TxAttempts, TxAttemptsDefault)
	out.BackoffMax = cmp.Or(out.BackoffMax, BackoffMaxDefault)
	out.RecordBackoff = cmp.Or(out.RecordBackoff, RecordBackoffDefault)
	out.BreakerFailures = cmp.Or(out.BreakerFailures, BreakerFailuresDefault)
	out.BreakerTimeout = cmp.Or(out.BreakerTimeout, BreakerTimeoutDefault)
	out.StreakLimit = cmp.Or(out.StreakLimit, StreakLimitDefault)
	out.ConsumerExpiry = cmp.Or(out.ConsumerExpiry, ConsumerExpiryDefault)
	out.ProjectionTarget = cmp.Or(out.ProjectionTarget, ProjectionTargetDefault)
	out.LockTimeout = cmp.Or(out.LockTimeout, LockTimeoutDefault)
	out.StatementTimeout = cmp.Or(out.StatementTimeout, StatementTimeoutDefault)
	out.ReplayRate = cmp.Or(out.ReplayRate, ReplayRateDefault)
	out.LeaseTTL = cmp.Or(out.LeaseTTL, LeaseTTLDefault)
	out.TailGather = cmp.Or(out.TailGather, TailGatherDefault)
	return &out
}

// Validate checks c as New takes it: a zero field takes its default, any
// other value must be within its field's bound. Each error is a field's,
// named by the field (BatchSize, ClaimIdle, …), and they are joined. A nil
// config is valid. outboxd's flags are checked by it: the bounds of the
// worker's settings are here only.
func (c *Config) Validate() error {
	return c.defaults().validate()
}

// validate checks a defaulted config and names the offending field.
func (c *Config) validate() error {
	var errs []error
	errs = append(errs, outbox.ValidatePartitions(max(c.Partitions, 1)))
	if c.Partition < 0 || c.Partition >= max(c.Partitions, 1) {
		errs = append(errs, bounds.Errorf("Partition", fmt.Sprintf("%d of %d", c.Partition, c.Partitions), "must be between 0 and Partitions-1"))
	}
	if c.BatchSize < 1 || c.BatchSize > BatchSizeMax {
		errs = append(errs, bounds.Errorf("BatchSize", c.BatchSize, "must be between 1 and %d", BatchSizeMax))
	}
	if c.Block < time.Millisecond || c.Block > BlockMax {
		errs = append(errs, bounds.Errorf("Block", c.Block, "must be between 1ms and %s", BlockMax))
	}
	if c.ClaimIdle < ClaimIdleShortest {
		errs = append(errs, bounds.Errorf("ClaimIdle", c.ClaimIdle, "must be at least %s", ClaimIdleShortest))
	}
	if c.ClaimInterval < time.Millisecond {
		errs = append(errs, bounds.Errorf("ClaimInterval", c.ClaimInterval, "must be at least 1ms"))
	}
	for _, f := range []struct {
		name string
		v    int
	}{{"MaxDeliveries", c.MaxDeliveries}, {"TxAttempts", c.TxAttempts}, {"BreakerFailures", c.BreakerFailures}, {"StreakLimit", c.StreakLimit}} {
		if f.v < 1 {
			errs = append(errs, bounds.Errorf(f.name, f.v, "must be at least 1"))
		}
	}
	for _, f := range []struct {
		name string
		d    time.Duration
	}{{"BackoffMax", c.BackoffMax}, {"RecordBackoff", c.RecordBackoff}, {"BreakerTimeout", c.BreakerTimeout}, {"ConsumerExpiry", c.ConsumerExpiry}} {
		if f.d < time.Millisecond {
			errs = append(errs, bounds.Errorf(f.name, f.d, "must be at least 1ms"))
		}
	}
	if c.ProjectionTarget < ProjectionTargetShortest || c.ProjectionTarget > ProjectionTargetLongest {
		errs = append(errs, bounds.Errorf("ProjectionTarget", c.ProjectionTarget, "must be between %s and %s", ProjectionTargetShortest, ProjectionTargetLongest))
	}
	for _, f := range []struct {
		name string
		d    time.Duration
	}{{"LockTimeout", c.LockTimeout}, {"StatementTimeout", c.StatementTimeout}} {
		if f.d != TimeoutOff && f.d < time.Millisecond {
			errs = append(errs, bounds.Errorf(f.name, f.d, "must be TimeoutOff or at least 1ms"))
		}
	}
	if c.LeaseTTL < LeaseTTLShortest {
		errs = append(errs, bounds.Errorf("LeaseTTL", c.LeaseTTL, "must be at least %s", LeaseTTLShortest))
	}
	if c.TailGather > TailGatherMax {
		errs = append(errs, bounds.Errorf("TailGather", c.TailGather, "must be at most %s, or negative for none", TailGatherMax))
	}
	if c.ProjectionRate < 0 {
		errs = append(errs, bounds.Errorf("ProjectionRate", c.ProjectionRate, "must be 0 (no bound) or positive"))
	}
	if c.ReplayRate <= 0 {
		errs = append(errs, bounds.Errorf("ReplayRate", c.ReplayRate, "must be rate.Inf (no bound) or positive"))
	}
	return errors.Join(errs...)
}

// NewReplayLimiter returns the bound of a replay lane read at r entries
// per second (rate.Inf: no bound), to share between the Workers of a
// process (Config.ReplayLimiter). Its burst is a twentieth of a second of r
// (at least one entry), so that a batch of the lane holds the live stream
// up for little longer than the projection of that many entries.
func NewReplayLimiter(r rate.Limit) *rate.Limiter {
	if r == rate.Inf {
		return rate.NewLimiter(rate.Inf, 0)
	}
	return rate.NewLimiter(r, max(1, int(math.Ceil(float64(r)/20))))
}

// OrderedLeaseName is the store lease an Ordered Worker holds on
// partition p of stream's group: "work:<stream>:<group>:<p>".
func OrderedLeaseName(stream, group string, p int) string {
	return store.OrderedLeaseName(stream, group, p)
}
