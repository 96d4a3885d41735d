package dispatcher

import (
	"cmp"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/outboxd/outboxd/internal/bounds"
	"github.com/outboxd/outboxd/internal/failpolicy"
	"github.com/outboxd/outboxd/internal/fault"
	"github.com/outboxd/outboxd/internal/instance"
	"github.com/outboxd/outboxd/internal/stream"
	"github.com/outboxd/outboxd/outbox"
	"github.com/outboxd/outboxd/store"
)

// Defaults of Config.
const (
	// BatchSizeDefault is the default Config.BatchSize.
	BatchSizeDefault = 2000
	// LeaseTTLDefault is the default Config.LeaseTTL.
	LeaseTTLDefault = 15 * time.Second
	// IdleCheckpointDefault is the default Config.IdleCheckpoint.
	IdleCheckpointDefault = time.Second
	// IdleCheckpointMaxDefault is the default Config.IdleCheckpointMax.
	IdleCheckpointMaxDefault = time.Minute
	// MarkIntervalDefault is the default Config.MarkInterval.
	MarkIntervalDefault = 100 * time.Millisecond
	// PollIntervalDefault is the default Config.PollInterval.
	PollIntervalDefault = 100 * time.Millisecond
	// FeedGatherDefault is the default Config.FeedGather: at 500 events/s
	// a relay batch of about ten, so that the relay's store write and the
	// worker's store read, PostgreSQL transaction and store write are paid
	// once per ten events rather than per two or three (docs/benchmarks.md,
	// "Fourth pass"), for at most 20ms more to the stream.
	FeedGatherDefault = 20 * time.Millisecond
	// BackoffMaxDefault is the default Config.BackoffMax.
	BackoffMaxDefault = 5 * time.Second
	// SweepIntervalDefault is the default Config.SweepInterval.
	SweepIntervalDefault = 30 * time.Second
	// SweepMinAgeDefault is the default Config.SweepMinAge.
	SweepMinAgeDefault = 5 * time.Second
	// EventPurgeChunk is how many originals one DeleteSynced call (one
	// store transaction) removes at most, and EventPurgeMax how many one
	// sweep removes at most (the rest waits for the next sweep, so the
	// relay is never held up for long).
	EventPurgeChunk = 1000
	EventPurgeMax   = 10 * EventPurgeChunk
	// OutboxRetentionDefault is the default Config.OutboxRetention.
	OutboxRetentionDefault = 24 * time.Hour
	// RetentionDefault is OutboxRetentionDefault.
	//
	// Deprecated: use OutboxRetentionDefault; RetentionDefault goes in the
	// next version.
	RetentionDefault = OutboxRetentionDefault
	// BreakerFailuresDefault is the default Config.BreakerFailures.
	BreakerFailuresDefault = failpolicy.BreakerFailuresDefault
	// BreakerTimeoutDefault is the default Config.BreakerTimeout.
	BreakerTimeoutDefault = failpolicy.BreakerTimeoutDefault
	// StreakLimitDefault is the default Config.StreakLimit.
	StreakLimitDefault = failpolicy.StreakLimitDefault
	// StreamRetentionDefault is the default Config.StreamRetention.
	StreamRetentionDefault = stream.StreamRetentionDefault
	// MemoryHighDefault is the default Config.MemoryHigh (percent).
	MemoryHighDefault = 85
	// TrimIntervalDefault is the default Config.TrimInterval.
	TrimIntervalDefault = time.Second
)

// Bounds checked by Validate.
const (
	// BatchSizeMax is the largest accepted Config.BatchSize.
	BatchSizeMax = 10_000
	// MinLeaseTTL is the shortest accepted Config.LeaseTTL.
	MinLeaseTTL = 30 * time.Millisecond
	// EventRetentionTypeShortest is the shortest retention (but 0) of
	// Config.EventRetentionTypes and Config.EventRetentionSources: below
	// it a client still retrying could find its idempotency key
	// forgotten.
	EventRetentionTypeShortest = store.EventRetentionShortest
	// FeedGatherMax is the longest accepted Config.FeedGather.
	FeedGatherMax = time.Second
)

// Config configures a Dispatcher. A nil config means all defaults.
type Config struct {
	// Stream is the Redis stream to relay into; only outbox entries whose
	// stream equals it are relayed, and it names the dispatcher's lease and
	// checkpoint. Defaults to outbox.StreamDefault.
	Stream string
	// BatchSize is the most entries relayed by one pipelined XADD and one
	// store write (MarkRelayed: the marks and the checkpoint). Defaults to BatchSizeDefault
	// (2,000: the fastest of 250, 500, 1,000 and 2,000 in the chunk-size
	// table of docs/benchmarks.md; a checkpoint per batch stays within the
	// 1,000 to 10,000 records between checkpoints); at most
	// BatchSizeMax.
	BatchSize int
	// LeaseTTL is how long the lease lasts without renewal: the time a
	// standby waits before taking over from a leader that died. The leader
	// renews and standbys poll every LeaseTTL/3. Defaults to
	// LeaseTTLDefault (15s); at least MinLeaseTTL.
	LeaseTTL time.Duration
	// Owner names this dispatcher in the lease. Defaults to
	// "<hostname>-<pid>", with "-<n>" appended for the second and later
	// Dispatcher of one process.
	Owner string
	// IdleCheckpoint is how long the feed waits for entries before the
	// relay looks whether the checkpoint is due, and how soon after the
	// feed delivered only entries relayed already (by a catch-up or a
	// sweep) the checkpoint records the position past them. Defaults to
	// IdleCheckpointDefault (1s).
	IdleCheckpoint time.Duration
	// IdleCheckpointMax is how often the checkpoint is written while the
	// feed delivers nothing of the stream (or partition): each write is a
	// majority write that every change stream on the store reads, so P
	// idle partitions would cost P writes per IdleCheckpoint for nothing.
	// It keeps an idle feed's position within the store's history (the
	// oplog window on MongoDB must be longer). Defaults to
	// IdleCheckpointMaxDefault (1m).
	IdleCheckpointMax time.Duration
	// MarkInterval is the least time between the starts of two store
	// writes of relayed batches (MarkRelayed: dispatchedAt and the
	// checkpoint) while less than BatchSize entries wait for one: the
	// batches added to the stream meanwhile are merged into the next write
	// (pipeline.go). It bounds how often a feed that delivers a few entries
	// at a time writes to the store, not how soon an entry is in the
	// stream; a crash relays the entries of at most one such interval again.
	// Defaults to MarkIntervalDefault (100ms).
	MarkInterval time.Duration
	// PollInterval is the feed's pause between two looks at the store when
	// nothing arrived (and its MaxAwaitTime on MongoDB). Defaults to
	// PollIntervalDefault (100ms).
	PollInterval time.Duration
	// FeedGather is how long the feed, woken by a commit after it found
	// nothing, waits for more commits before it reads
	// (store.FeedOptions.Gather): under a light load the relay then reads,
	// adds and marks the entries of several commits at once, and the
	// workers get them in one batch. It adds at most that much to an
	// entry's time to the stream, and never delays a backlog. Defaults to
	// FeedGatherDefault (20ms); negative: none (every commit read at once).
	FeedGather time.Duration
	// SweepInterval is how often the leader relays the undispatched entries
	// older than SweepMinAge that the feed did not deliver (an entry that
	// became visible behind the feed's start, an undecodable change event),
	// and how often its retention service runs (OutboxRetention,
	// EventRetention). Defaults to SweepIntervalDefault (30s).
	SweepInterval time.Duration
	// SweepMinAge keeps the periodic sweep away from entries the feed is
	// about to deliver. Defaults to SweepMinAgeDefault (5s).
	SweepMinAge time.Duration
	// OutboxRetention is how long a dispatched outbox entry is kept; the
	// leader deletes older ones every SweepInterval (--outbox-retention).
	// Defaults to Retention when that is set, else OutboxRetentionDefault
	// (24h).
	OutboxRetention time.Duration
	// Retention is OutboxRetention's former name, read when
	// OutboxRetention is 0.
	//
	// Deprecated: set OutboxRetention; Retention goes in the next version.
	Retention time.Duration
	// EventRetention is how long a synced original is kept after its
	// createdAt (--event-retention) when neither its type nor its source
	// has a retention of its own (EventRetentionTypes,
	// EventRetentionSources); every SweepInterval the leader's retention
	// service deletes older ones (store.Store.DeleteSynced), at most
	// EventPurgeMax per retention and round in transactions of
	// EventPurgeChunk. Pending and parked originals are never deleted.
	// Defaults to 0: originals are kept.
	EventRetention time.Duration
	// EventRetentionTypes are retentions of the synced originals of a type
	// (--event-retention-type TYPE=DURATION), in place of EventRetention
	// and of EventRetentionSources for that type's originals: 0 keeps them
	// forever, else at least EventRetentionTypeShortest. Defaults to none.
	EventRetentionTypes map[string]time.Duration
	// EventRetentionSources are retentions of the synced originals of a
	// sourceKey (--event-retention-source SOURCE=DURATION), in place of
	// EventRetention for that source's originals whose type has none of
	// its own: 0 keeps them forever, else at least
	// EventRetentionTypeShortest. Defaults to none.
	EventRetentionSources map[string]time.Duration
	// BackoffMax caps the jittered exponential back-off after a failure
	// (Redis or the store unreachable). Defaults to BackoffMaxDefault (5s).
	BackoffMax time.Duration
	// BreakerFailures is how many consecutive failed XADD pipelines open
	// the circuit around Redis. Defaults to BreakerFailuresDefault (5).
	BreakerFailures int
	// BreakerTimeout is how long the open circuit around Redis stays open
	// before it lets one probe through, and the pause between two attempts
	// while automatic retries are halted (StreakLimit). Defaults to
	// BreakerTimeoutDefault (30s).
	BreakerTimeout time.Duration
	// StreakLimit is how many times in a row one error code may come
	// before the dispatcher halts automatic retries of its class (see
	// Dispatcher.ResumeRetries). Defaults to StreakLimitDefault (50).
	StreakLimit int
	// StreamRetention is how long an acknowledged entry stays in the
	// stream (--stream-retention): every TrimInterval the leader trims the
	// stream and its replay lane below the lowest id any consumer group
	// still needs and below now minus StreamRetention
	// (stream.Client.Trim). An entry some group has not acknowledged is
	// never trimmed. Defaults to StreamRetentionDefault (1m).
	StreamRetention time.Duration
	// MemoryHigh is the high-water mark of Redis's memory, in percent of
	// its maxmemory (--redis-memory-high): while used_memory is at or
	// above it, or Redis answers an XADD with OOM, the relay holds
	// (nothing added, marked or checkpointed; the gauge
	// outboxd_dispatcher_backpressure says so) and resumes by itself once
	// memory is back. 100 holds on OOM replies only; without a maxmemory
	// only those can come. Defaults to MemoryHighDefault (85); between 1
	// and 100.
	MemoryHigh int
	// TrimInterval is how often the leader trims the stream, reads Redis's
	// memory and the groups' lag. Defaults to TrimIntervalDefault (1s).
	TrimInterval time.Duration
	// TrimOff turns trimming off (the benchmark's "before"; no flag sets
	// it: a bounded stream needs none). Defaults to false.
	TrimOff bool
	// Now tells the time for dispatchedAt, checkpoints and lease expiries.
	// Defaults to time.Now; tests set a fake clock.
	Now func() time.Time
	// Registerer receives the dispatcher's metrics. Defaults to none
	// (metrics are kept but not exported).
	Registerer prometheus.Registerer
	// Partitions is the stream's number of partitions (--partitions, 1 to
	// outbox.PartitionsMax): with more than one the Dispatcher relays the
	// partitions it holds a lease of, at most its fair share of the
	// dispatchers of the stream (see the package documentation). Defaults
	// to 1: one lease, the stream's, as before partitions.
	Partitions int

	// part is the one partition a Dispatcher of a partitioned stream's
	// relays (set by the Dispatcher that shares them out); the zero
	// Partition is the whole stream.
	part store.Partition
	// gate tells part's Dispatcher whether it may take its lease.
	gate func() bool

	// faults arms fault points in tests (export_test.go).
	faults *fault.Set
}

// names names the instances that name none.
var names = instance.NewNamer("dispatcher")

// withDefaults returns a copy of cfg with every unset field defaulted.
func (c *Config) withDefaults() *Config {
	out := c.defaults()
	if out.Owner == "" {
		out.Owner = names.Next()
	}
	if out.Now == nil {
		out.Now = time.Now
	}
	return out
}

// defaults returns a copy of cfg with every unset bounded field defaulted:
// what Validate checks (it names no owner).
func (c *Config) defaults() *Config {
	var out Config
	if c != nil {
		out = *c
	}
	out.Stream = cmp.Or(out.Stream, outbox.StreamDefault)
	out.BatchSize = cmp.Or(out.BatchSize, BatchSizeDefault)
	out.LeaseTTL = cmp.Or(out.LeaseTTL, LeaseTTLDefault)
	out.IdleCheckpoint = cmp.Or(out.IdleCheckpoint, IdleCheckpointDefault)
	out.IdleCheckpointMax = cmp.Or(out.IdleCheckpointMax, IdleCheckpointMaxDefault)
	out.PollInterval = cmp.Or(out.PollInterval, PollIntervalDefault)
	out.FeedGather = cmp.Or(out.FeedGather, FeedGatherDefault)
	out.MarkInterval = cmp.Or(out.MarkInterval, MarkIntervalDefault)
	out.SweepInterval = cmp.Or(out.SweepInterval, SweepIntervalDefault)
	out.SweepMinAge = cmp.Or(out.SweepMinAge, SweepMinAgeDefault)
	out.OutboxRetention = cmp.Or(out.OutboxRetention, out.Retention, OutboxRetentionDefault)
	out.Retention = out.OutboxRetention //nolint:staticcheck // the deprecated alias reads the same
	out.BackoffMax = cmp.Or(out.BackoffMax, BackoffMaxDefault)
	out.BreakerFailures = cmp.Or(out.BreakerFailures, BreakerFailuresDefault)
	out.BreakerTimeout = cmp.Or(out.BreakerTimeout, BreakerTimeoutDefault)
	out.StreakLimit = cmp.Or(out.StreakLimit, StreakLimitDefault)
	out.StreamRetention = cmp.Or(out.StreamRetention, StreamRetentionDefault)
	out.MemoryHigh = cmp.Or(out.MemoryHigh, MemoryHighDefault)
	out.TrimInterval = cmp.Or(out.TrimInterval, TrimIntervalDefault)
	out.Partitions = cmp.Or(out.Partitions, outbox.PartitionsDefault)
	// The caller's maps stay the caller's.
	out.EventRetentionTypes = maps.Clone(out.EventRetentionTypes)
	out.EventRetentionSources = maps.Clone(out.EventRetentionSources)
	return &out
}

// Validate checks c as New takes it: a zero field takes its default, any
// other value must be within its field's bound. Each error is a field's,
// named by the field (BatchSize, LeaseTTL, …), and they are joined. A nil
// config is valid. outboxd's flags are checked by it: the bounds of the
// dispatcher's settings are here only.
func (c *Config) Validate() error {
	return c.defaults().validate()
}

// validate checks a defaulted config; each error names the field.
func (c *Config) validate() error {
	var errs []error
	if strings.TrimSpace(c.Stream) != c.Stream {
		errs = append(errs, bounds.Errorf("Stream", fmt.Sprintf("%q", c.Stream), "must not start or end with white space"))
	}
	if c.BatchSize < 1 || c.BatchSize > BatchSizeMax {
		errs = append(errs, bounds.Errorf("BatchSize", c.BatchSize, "must be between 1 and %d", BatchSizeMax))
	}
	if c.LeaseTTL < MinLeaseTTL {
		errs = append(errs, bounds.Errorf("LeaseTTL", c.LeaseTTL, "must be at least %s", MinLeaseTTL))
	}
	for _, f := range []struct {
		name string
		d    time.Duration
	}{{"IdleCheckpoint", c.IdleCheckpoint}, {"IdleCheckpointMax", c.IdleCheckpointMax}, {"PollInterval", c.PollInterval}, {"MarkInterval", c.MarkInterval},
		{"SweepInterval", c.SweepInterval}, {"BackoffMax", c.BackoffMax}, {"BreakerTimeout", c.BreakerTimeout}, {"StreamRetention", c.StreamRetention}, {"TrimInterval", c.TrimInterval},
		{"OutboxRetention", c.OutboxRetention}} {
		if f.d < time.Millisecond {
			errs = append(errs, bounds.Errorf(f.name, f.d, "must be at least 1ms"))
		}
	}
	if c.EventRetention < 0 {
		errs = append(errs, bounds.Errorf("EventRetention", c.EventRetention, "must not be negative"))
	}
	errs = append(errs, validateRetentions("EventRetentionTypes", "type", c.EventRetentionTypes)...)
	errs = append(errs, validateRetentions("EventRetentionSources", "source", c.EventRetentionSources)...)
	if c.FeedGather > FeedGatherMax {
		errs = append(errs, bounds.Errorf("FeedGather", c.FeedGather, "must be at most %s, or negative for none", FeedGatherMax))
	}
	if c.SweepMinAge < 0 {
		errs = append(errs, bounds.Errorf("SweepMinAge", c.SweepMinAge, "must not be negative"))
	}
	if c.BreakerFailures < 1 {
		errs = append(errs, bounds.Errorf("BreakerFailures", c.BreakerFailures, "must be at least 1"))
	}
	if c.MemoryHigh < 1 || c.MemoryHigh > 100 {
		errs = append(errs, bounds.Errorf("MemoryHigh", c.MemoryHigh, "must be between 1 and 100 (percent of maxmemory)"))
	}
	errs = append(errs, outbox.ValidatePartitions(c.Partitions))
	if c.StreakLimit < 1 {
		errs = append(errs, bounds.Errorf("StreakLimit", c.StreakLimit, "must be at least 1"))
	}
	return errors.Join(errs...)
}

// validateRetentions checks the retentions by key of field (EventRetentionTypes,
// EventRetentionSources), in the order of their keys.
func validateRetentions(field, what string, retentions map[string]time.Duration) []error {
	var errs []error
	for _, key := range slices.Sorted(maps.Keys(retentions)) {
		switch d := retentions[key]; {
		case key == "" || strings.TrimSpace(key) != key:
			errs = append(errs, bounds.Errorf(field, fmt.Sprintf("%q", key), "needs a %s that is not empty nor starts or ends with white space", what))
		case d < 0 || (d > 0 && d < EventRetentionTypeShortest):
			errs = append(errs, bounds.Errorf(field, fmt.Sprintf("%s=%s", key, d), "needs the retention of %s %q to be 0 (keep them forever) or at least %s",
				what, key, EventRetentionTypeShortest))
		}
	}
	return errs
}
