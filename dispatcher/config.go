package dispatcher

import (
	"cmp"
	"errors"
	"fmt"
	"strings"
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
	// LeaseTTLDefault is the default Config.LeaseTTL.
	LeaseTTLDefault = 15 * time.Second
	// IdleCheckpointDefault is the default Config.IdleCheckpoint.
	IdleCheckpointDefault = time.Second
	// PollIntervalDefault is the default Config.PollInterval.
	PollIntervalDefault = 100 * time.Millisecond
	// BackoffMaxDefault is the default Config.BackoffMax.
	BackoffMaxDefault = 5 * time.Second
)

// Bounds checked by validate.
const (
	// BatchSizeMax is the largest accepted Config.BatchSize.
	BatchSizeMax = 10_000
	// LeaseTTLMin is the shortest accepted Config.LeaseTTL.
	LeaseTTLMin = 30 * time.Millisecond
)

// Config configures a Dispatcher. A nil config means all defaults.
type Config struct {
	// Stream is the Redis stream to relay into; only outbox entries whose
	// stream field equals it are relayed, and it names the dispatcher state
	// document. Defaults to outbox.StreamDefault.
	Stream string
	// BatchSize is the most entries relayed by one pipelined XADD, one
	// UpdateMany and one checkpoint. Defaults to BatchSizeDefault (256); at
	// most BatchSizeMax.
	BatchSize int
	// LeaseTTL is how long a lease lasts without renewal: the time a standby
	// waits before taking over from a leader that died. The leader renews
	// and standbys poll every LeaseTTL/3. Defaults to LeaseTTLDefault (15s);
	// at least LeaseTTLMin.
	LeaseTTL time.Duration
	// Owner names this dispatcher in the lease. Defaults to
	// "<hostname>-<pid>", with "-<n>" appended for the second and later
	// Dispatcher of one process.
	Owner string
	// IdleCheckpoint is how often the checkpoint (resume token when the
	// stream provides one, and checkpointAt) is written while no entry
	// arrives. Defaults to IdleCheckpointDefault (1s).
	IdleCheckpoint time.Duration
	// PollInterval is the pause after the change stream reported nothing new
	// (TryNext false) before it is asked again, and the MaxAwaitTime of the
	// stream on a replica set. Defaults to PollIntervalDefault (100ms).
	PollInterval time.Duration
	// MaxStreamLen trims the stream approximately (XADD MAXLEN ~) when
	// positive. Defaults to 0: no trimming, because trimming can delete
	// entries no consumer has acknowledged yet (see the package doc).
	MaxStreamLen int64
	// BackoffMax caps the jittered exponential back-off after a failure
	// (Redis or MongoDB unreachable). Defaults to BackoffMaxDefault (5s).
	BackoffMax time.Duration
	// Clock stamps dispatchedAt, checkpointAt and lease expiries. Defaults
	// to the system clock.
	Clock clock.Clock
	// Faults arms fault points in tests. Defaults to none.
	Faults *fault.Set
	// Registerer receives the dispatcher's metrics. Defaults to none
	// (metrics are kept but not exported).
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
	if c.Owner == "" {
		c.Owner = config.InstanceName("dispatcher", instances.Add(1))
	}
	c.BatchSize = cmp.Or(c.BatchSize, BatchSizeDefault)
	c.LeaseTTL = cmp.Or(c.LeaseTTL, LeaseTTLDefault)
	c.IdleCheckpoint = cmp.Or(c.IdleCheckpoint, IdleCheckpointDefault)
	c.PollInterval = cmp.Or(c.PollInterval, PollIntervalDefault)
	c.BackoffMax = cmp.Or(c.BackoffMax, BackoffMaxDefault)
	c.Clock = cmp.Or[clock.Clock](c.Clock, clock.System)
	return &c
}

// validate checks a defaulted config and names the offending field.
func (c *Config) validate() error {
	var errs []error
	if strings.TrimSpace(c.Stream) != c.Stream {
		errs = append(errs, fmt.Errorf("Stream must not start or end with white space, got %q", c.Stream))
	}
	if c.BatchSize < 1 || c.BatchSize > BatchSizeMax {
		errs = append(errs, fmt.Errorf("BatchSize must be between 1 and %d, got %d", BatchSizeMax, c.BatchSize))
	}
	if c.LeaseTTL < LeaseTTLMin {
		errs = append(errs, fmt.Errorf("LeaseTTL must be at least %s, got %s", LeaseTTLMin, c.LeaseTTL))
	}
	if c.IdleCheckpoint < time.Millisecond {
		errs = append(errs, fmt.Errorf("IdleCheckpoint must be at least 1ms, got %s", c.IdleCheckpoint))
	}
	if c.PollInterval < time.Millisecond {
		errs = append(errs, fmt.Errorf("PollInterval must be at least 1ms, got %s", c.PollInterval))
	}
	if c.MaxStreamLen < 0 {
		errs = append(errs, fmt.Errorf("MaxStreamLen must be 0 (no trimming) or positive, got %d", c.MaxStreamLen))
	}
	if c.BackoffMax < time.Millisecond {
		errs = append(errs, fmt.Errorf("BackoffMax must be at least 1ms, got %s", c.BackoffMax))
	}
	return errors.Join(errs...)
}
