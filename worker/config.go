package worker

import (
	"cmp"
	"errors"
	"fmt"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/outboxd/outboxd/internal/failpolicy"
	"github.com/outboxd/outboxd/internal/fault"
	"github.com/outboxd/outboxd/internal/instance"
	"github.com/outboxd/outboxd/outbox"
	"github.com/outboxd/outboxd/readmodel"
	"github.com/outboxd/outboxd/stream"
)

// Defaults of Config.
const (
	// BatchSizeDefault is the default Config.BatchSize.
	BatchSizeDefault = 2000
	// BlockDefault is the default Config.Block.
	BlockDefault = 2 * time.Second
	// ClaimIdleDefault is the default Config.ClaimIdle.
	ClaimIdleDefault = 30 * time.Second
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
)

// Bounds checked by validate.
const (
	// BatchSizeMax is the largest accepted Config.BatchSize.
	BatchSizeMax = 10_000
	// BlockMax is the longest accepted Config.Block: a stop request waits
	// for the read in progress.
	BlockMax = time.Minute
	// RecordBackoffMax caps the pause before a failing record's next
	// delivery, however many deliveries Config.MaxDeliveries allows.
	RecordBackoffMax = 5 * time.Minute
)

// Config configures a Worker. A nil config means all defaults.
type Config struct {
	// Stream is the stream to consume. Defaults to outbox.StreamDefault.
	Stream string
	// Group is the consumer group. Defaults to stream.GroupDefault.
	Group string
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
	// half of ClaimIdle, at most ClaimIntervalMax (15s).
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
	// RecordBackoffMax): about 1s, 2s, 4s by default. Defaults to
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
	// Projector writes batches into PostgreSQL. Defaults to
	// readmodel.NewProjector() (the events table and the daily statistics).
	Projector Projector
	// Now stamps syncedAt and syncFailure.at. Defaults to time.Now; tests
	// set a fake clock.
	Now func() time.Time
	// Registerer receives the worker's metrics. Defaults to none (metrics
	// are kept but not exported).
	Registerer prometheus.Registerer

	// faults arms fault points in tests (export_test.go).
	faults *fault.Set
}

// names names the instances that name none.
var names = instance.NewNamer("worker")

// withDefaults returns a copy of cfg with every unset field defaulted.
func (c *Config) withDefaults() *Config {
	var out Config
	if c != nil {
		out = *c
	}
	out.Stream = cmp.Or(out.Stream, outbox.StreamDefault)
	out.Group = cmp.Or(out.Group, stream.GroupDefault)
	if out.Consumer == "" {
		out.Consumer = names.Next()
	}
	out.BatchSize = cmp.Or(out.BatchSize, BatchSizeDefault)
	out.Block = cmp.Or(out.Block, BlockDefault)
	out.ClaimIdle = cmp.Or(out.ClaimIdle, ClaimIdleDefault)
	out.ClaimInterval = cmp.Or(out.ClaimInterval, min(out.ClaimIdle/2, ClaimIntervalMax))
	out.MaxDeliveries = cmp.Or(out.MaxDeliveries, MaxDeliveriesDefault)
	out.TxAttempts = cmp.Or(out.TxAttempts, TxAttemptsDefault)
	out.BackoffMax = cmp.Or(out.BackoffMax, BackoffMaxDefault)
	out.RecordBackoff = cmp.Or(out.RecordBackoff, RecordBackoffDefault)
	out.BreakerFailures = cmp.Or(out.BreakerFailures, BreakerFailuresDefault)
	out.BreakerTimeout = cmp.Or(out.BreakerTimeout, BreakerTimeoutDefault)
	out.StreakLimit = cmp.Or(out.StreakLimit, StreakLimitDefault)
	out.ConsumerExpiry = cmp.Or(out.ConsumerExpiry, ConsumerExpiryDefault)
	out.Projector = cmp.Or[Projector](out.Projector, readmodel.NewProjector())
	if out.Now == nil {
		out.Now = time.Now
	}
	return &out
}

// validate checks a defaulted config and names the offending field.
func (c *Config) validate() error {
	var errs []error
	if c.BatchSize < 1 || c.BatchSize > BatchSizeMax {
		errs = append(errs, fmt.Errorf("BatchSize must be between 1 and %d (got %d)", BatchSizeMax, c.BatchSize))
	}
	if c.Block < time.Millisecond || c.Block > BlockMax {
		errs = append(errs, fmt.Errorf("Block must be between 1ms and %s (got %s)", BlockMax, c.Block))
	}
	if c.ClaimIdle < time.Millisecond {
		errs = append(errs, fmt.Errorf("ClaimIdle must be at least 1ms (got %s)", c.ClaimIdle))
	}
	if c.ClaimInterval < time.Millisecond {
		errs = append(errs, fmt.Errorf("ClaimInterval must be at least 1ms (got %s)", c.ClaimInterval))
	}
	if c.MaxDeliveries < 1 {
		errs = append(errs, fmt.Errorf("MaxDeliveries must be at least 1 (got %d)", c.MaxDeliveries))
	}
	if c.TxAttempts < 1 {
		errs = append(errs, fmt.Errorf("TxAttempts must be at least 1 (got %d)", c.TxAttempts))
	}
	for name, d := range map[string]time.Duration{"BackoffMax": c.BackoffMax, "RecordBackoff": c.RecordBackoff,
		"BreakerTimeout": c.BreakerTimeout, "ConsumerExpiry": c.ConsumerExpiry} {
		if d < time.Millisecond {
			errs = append(errs, fmt.Errorf("%s must be at least 1ms (got %s)", name, d))
		}
	}
	if c.BreakerFailures < 1 {
		errs = append(errs, fmt.Errorf("BreakerFailures must be at least 1 (got %d)", c.BreakerFailures))
	}
	if c.StreakLimit < 1 {
		errs = append(errs, fmt.Errorf("StreakLimit must be at least 1 (got %d)", c.StreakLimit))
	}
	return errors.Join(errs...)
}
