package worker

import (
	"cmp"
	"errors"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/outboxd/outboxd/internal/config"
	"github.com/outboxd/outboxd/internal/fault"
	"github.com/outboxd/outboxd/outbox"
)

// Defaults of Config.
const (
	// BatchSizeDefault is the default Config.BatchSize.
	BatchSizeDefault = 256
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
)

// Bounds checked by validate.
const (
	// BatchSizeMax is the largest accepted Config.BatchSize.
	BatchSizeMax = 10_000
	// BlockMax is the longest accepted Config.Block: a stop request waits
	// for the read in progress.
	BlockMax = time.Minute
)

// Config configures a Worker. A nil config means all defaults.
type Config struct {
	// Stream is the stream to consume. Defaults to outbox.StreamDefault.
	Stream string
	// Group is the consumer group. Defaults to outbox.GroupDefault.
	Group string
	// Consumer names this worker in the group; give a restarted worker the
	// same name to let it drain its own pending entries first. Defaults to
	// "<hostname>-<pid>", with "-<n>" appended for the second and later
	// Worker of one process.
	Consumer string
	// BatchSize is the COUNT of each XREADGROUP and XAUTOCLAIM, so at most
	// this many entries go into one PostgreSQL transaction. Defaults to
	// BatchSizeDefault (256); at most BatchSizeMax.
	BatchSize int
	// Block bounds how long one XREADGROUP waits for new entries, and so how
	// long a stop request or a due reclaim waits. It is never 0 (which would
	// make Redis block forever). Defaults to BlockDefault (2s); at most
	// BlockMax.
	Block time.Duration
	// ClaimIdle is how long an entry must have been pending (delivered, not
	// acknowledged) before XAUTOCLAIM takes it from its consumer, presumed
	// dead. It is also the pause before a failing record is tried again.
	// Defaults to ClaimIdleDefault (30s).
	ClaimIdle time.Duration
	// ClaimInterval is how often the worker runs XAUTOCLAIM. Defaults to
	// half of ClaimIdle, at most ClaimIntervalMax (15s).
	ClaimInterval time.Duration
	// MaxDeliveries is how many deliveries (the PEL delivery count) a record
	// that keeps failing gets before it is parked as poison: dead-lettered,
	// syncFailure set, acknowledged. Defaults to MaxDeliveriesDefault (3).
	MaxDeliveries int
	// TxAttempts is how often a projection transaction runs when it fails
	// with a serialization failure or deadlock (40001, 40P01). Defaults to
	// TxAttemptsDefault (5).
	TxAttempts int
	// BackoffMax caps the jittered exponential backoff after an
	// infrastructure failure (Redis, the store or PostgreSQL unreachable).
	// Defaults to BackoffMaxDefault (10s).
	BackoffMax time.Duration
	// Projector writes batches into PostgreSQL. Defaults to
	// NewEventsProjector().
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

var instances atomic.Int64

// withDefaults returns a copy of cfg with every unset field defaulted.
func (c *Config) withDefaults() *Config {
	var out Config
	if c != nil {
		out = *c
	}
	out.Stream = cmp.Or(out.Stream, outbox.StreamDefault)
	out.Group = cmp.Or(out.Group, outbox.GroupDefault)
	if out.Consumer == "" {
		out.Consumer = config.InstanceName("worker", instances.Add(1))
	}
	out.BatchSize = cmp.Or(out.BatchSize, BatchSizeDefault)
	out.Block = cmp.Or(out.Block, BlockDefault)
	out.ClaimIdle = cmp.Or(out.ClaimIdle, ClaimIdleDefault)
	out.ClaimInterval = cmp.Or(out.ClaimInterval, min(out.ClaimIdle/2, ClaimIntervalMax))
	out.MaxDeliveries = cmp.Or(out.MaxDeliveries, MaxDeliveriesDefault)
	out.TxAttempts = cmp.Or(out.TxAttempts, TxAttemptsDefault)
	out.BackoffMax = cmp.Or(out.BackoffMax, BackoffMaxDefault)
	out.Projector = cmp.Or[Projector](out.Projector, NewEventsProjector())
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
	if c.BackoffMax < time.Millisecond {
		errs = append(errs, fmt.Errorf("BackoffMax must be at least 1ms (got %s)", c.BackoffMax))
	}
	return errors.Join(errs...)
}
