package worker

import (
	"cmp"
	"errors"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/outboxd/outboxd/internal/clock"
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
	// infrastructure failure (Redis, MongoDB or PostgreSQL unreachable).
	// Defaults to BackoffMaxDefault (10s).
	BackoffMax time.Duration
	// Projector writes batches into PostgreSQL. Defaults to
	// NewEventsProjector().
	Projector Projector
	// Clock stamps syncedAt and syncFailure.at. Defaults to the system clock.
	Clock clock.Clock
	// Faults arms fault points in tests. Defaults to none.
	Faults *fault.Set
	// Registerer receives the worker's metrics. Defaults to none (metrics
	// are kept but not exported).
	Registerer prometheus.Registerer
}

var instances atomic.Int64

// withDefaults returns a copy of cfg with every unset field defaulted.
func (cfg *Config) withDefaults() *Config {
	var c Config
	if cfg != nil {
		c = *cfg
	}
	c.Stream = cmp.Or(c.Stream, outbox.StreamDefault)
	c.Group = cmp.Or(c.Group, outbox.GroupDefault)
	if c.Consumer == "" {
		c.Consumer = config.InstanceName("worker", instances.Add(1))
	}
	c.BatchSize = cmp.Or(c.BatchSize, BatchSizeDefault)
	c.Block = cmp.Or(c.Block, BlockDefault)
	c.ClaimIdle = cmp.Or(c.ClaimIdle, ClaimIdleDefault)
	c.ClaimInterval = cmp.Or(c.ClaimInterval, min(c.ClaimIdle/2, ClaimIntervalMax))
	c.MaxDeliveries = cmp.Or(c.MaxDeliveries, MaxDeliveriesDefault)
	c.TxAttempts = cmp.Or(c.TxAttempts, TxAttemptsDefault)
	c.BackoffMax = cmp.Or(c.BackoffMax, BackoffMaxDefault)
	c.Projector = cmp.Or[Projector](c.Projector, NewEventsProjector())
	c.Clock = cmp.Or[clock.Clock](c.Clock, clock.System)
	return &c
}

// validate checks a defaulted config and names the offending field.
func (c *Config) validate() error {
	var errs []error
	if c.BatchSize < 1 || c.BatchSize > BatchSizeMax {
		errs = append(errs, fmt.Errorf("BatchSize must be between 1 and %d, got %d", BatchSizeMax, c.BatchSize))
	}
	if c.Block < time.Millisecond || c.Block > BlockMax {
		errs = append(errs, fmt.Errorf("Block must be between 1ms and %s, got %s", BlockMax, c.Block))
	}
	if c.ClaimIdle < time.Millisecond {
		errs = append(errs, fmt.Errorf("ClaimIdle must be at least 1ms, got %s", c.ClaimIdle))
	}
	if c.ClaimInterval < time.Millisecond {
		errs = append(errs, fmt.Errorf("ClaimInterval must be at least 1ms, got %s", c.ClaimInterval))
	}
	if c.MaxDeliveries < 1 {
		errs = append(errs, fmt.Errorf("MaxDeliveries must be at least 1, got %d", c.MaxDeliveries))
	}
	if c.TxAttempts < 1 {
		errs = append(errs, fmt.Errorf("TxAttempts must be at least 1, got %d", c.TxAttempts))
	}
	if c.BackoffMax < time.Millisecond {
		errs = append(errs, fmt.Errorf("BackoffMax must be at least 1ms, got %s", c.BackoffMax))
	}
	return errors.Join(errs...)
}
