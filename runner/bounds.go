package runner

import (
	"errors"
	"flag"
	"fmt"
	"strings"
	"time"

	"golang.org/x/time/rate"

	"github.com/outboxd/outboxd/dispatcher"
	"github.com/outboxd/outboxd/internal/bounds"
	"github.com/outboxd/outboxd/internal/config"
	"github.com/outboxd/outboxd/internal/httpapi"
	"github.com/outboxd/outboxd/internal/operator"
	ostatus "github.com/outboxd/outboxd/internal/status"
	"github.com/outboxd/outboxd/outbox"
	"github.com/outboxd/outboxd/reconciler"
	"github.com/outboxd/outboxd/store"
	"github.com/outboxd/outboxd/store/mongostore"
	"github.com/outboxd/outboxd/worker"
)

// The bounds of the settings are the components': each config's Validate
// (worker.Config, dispatcher.Config, reconciler.Config, the HTTP API's,
// the committer's, the store's…) holds them, and the flags only parse.
// validateBounds builds every config the role's flags set, with the
// builders below that the role builds them with, asks its Validate, and
// reports a field's error as the flag's: "--claim-idle must be at least
// 1ms (got 500µs)".

// boundCheck is one component config the flags set: its Validate's error
// and the flag of each field a flag sets.
type boundCheck struct {
	name  string
	on    bool
	err   func() error
	flags map[string]string
}

// breakerFlags are the flags of the failure policy the worker and the
// dispatcher share.
var breakerFlags = map[string]string{
	"BreakerFailures": "breaker-failures", "BreakerTimeout": "breaker-timeout", "StreakLimit": "error-streak-limit",
}

// withBreaker returns flags with breakerFlags added.
func withBreaker(flags map[string]string) map[string]string {
	for k, v := range breakerFlags {
		flags[k] = v
	}
	return flags
}

// validateBounds checks every component setting the role's flags set with
// the component's own Validate; the error names the flag.
func (o *options) validateBounds() error {
	has := o.registered
	checks := []boundCheck{
		{"store", has["outbox-retention"] || has["event-retention"], func() error { return o.migrateConfig().Validate() },
			map[string]string{"OutboxRetention": "outbox-retention", "EventRetention": "event-retention"}},
		{"MongoDB store", has["mongo-max-pool"], func() error { return o.mongoOptions().Validate() },
			map[string]string{"MaxPoolSize": "mongo-max-pool"}},
		{"messages", has["message-payload-max"], func() error { return o.messageOptions().Validate() },
			map[string]string{"PayloadMax": "message-payload-max"}},
		{"HTTP server", has["http-max-bodies"], func() error { return o.serverConfig().Validate() }, map[string]string{
			"BodyTimeout": "http-body-timeout", "IdleTimeout": "http-idle-timeout", "WriteTimeout": "http-write-timeout",
			"MaxInFlightBodies": "http-max-bodies", "MaxClientBodies": "http-max-client-bodies", "MaxConns": "http-max-conns"}},
		{"HTTP API", has["max-body"], func() error { return o.httpConfig().Validate() }, map[string]string{
			"MaxBody": "max-body", "MaxBatch": "max-batch", "MaxValues": "max-values", "MaxDecodes": "http-max-decodes", "RequestTimeout": "request-timeout"}},
		{"group commit", has["ingest-group-max"], func() error { return o.committerConfig().Validate() }, map[string]string{
			"GroupWait": "ingest-group-wait", "GroupMax": "ingest-group-max", "GroupMaxBytes": "ingest-group-max-bytes", "GroupTimeout": "request-timeout"}},
		{"console", has["ui-sample-every"], func() error { return o.historyConfig().Validate() },
			map[string]string{"Every": "ui-sample-every"}},
		{"dispatcher", has["relay-batch"] || has["event-retention-type"], func() error { return o.dispatcherConfig().Validate() }, withBreaker(map[string]string{
			"BatchSize": "relay-batch", "FeedGather": "relay-gather", "LeaseTTL": "lease-ttl", "OutboxRetention": "outbox-retention",
			"EventRetention": "event-retention", "StreamRetention": "stream-retention", "MemoryHigh": "redis-memory-high", "Partitions": "partitions",
			"EventRetentionTypes": "event-retention-type", "EventRetentionSources": "event-retention-source"})},
		{"worker", has["max-deliveries"], func() error { return o.workerConfig().Validate() }, withBreaker(map[string]string{
			"BatchSize": "batch-size", "ProjectionTarget": "projection-target", "LockTimeout": "lock-timeout", "StatementTimeout": "statement-timeout",
			"ReplayRate": "replay-rate", "ProjectionRate": "projection-rate", "ClaimIdle": "claim-idle", "MaxDeliveries": "max-deliveries",
			"LeaseTTL": "lease-ttl", "RecordBackoff": "retry-backoff", "ConsumerExpiry": "consumer-expiry", "Partitions": "partitions"})},
		{"reconciler", has["min-age"], func() error { return o.reconcilerConfig().Validate() }, map[string]string{
			"MinAge": "min-age", "RequeueAfter": "requeue-after", "Limit": "limit", "MaxRequeues": "max-requeues",
			"Every": "every", "Interval": "expected-every", "Partitions": "partitions"}},
		{"audit", has["audit-sample"], func() error { return o.auditConfig().Validate() },
			map[string]string{"Every": "audit-every", "Sample": "audit-sample"}},
		{"replay and verify", has["chunk"], func() error { return operatorBound(operator.ValidateLimit(o.chunk)) },
			map[string]string{"limit": "chunk"}},
		{"DLQ listing", has["limit"] && !has["min-age"], func() error { return operatorBound(operator.ValidateLimit(o.limit)) },
			map[string]string{"limit": "limit"}},
	}
	for _, c := range checks {
		if !c.on {
			continue
		}
		if err := o.flagError(c.name, c.err(), c.flags); err != nil {
			return err
		}
	}
	return nil
}

// flagError returns err's first field error as a usage error of the flag
// that sets the field, with the value as the flag reads it; a field no flag
// sets (one a flag's value decides, as the worker's ClaimInterval is half
// of --claim-idle) is named in the component's words.
func (o *options) flagError(component string, err error, flags map[string]string) error {
	if err == nil {
		return nil
	}
	fields := bounds.Fields(err)
	for _, fe := range fields {
		name, ok := flags[fe.Field]
		if !ok {
			continue
		}
		got := fe.Got
		if f := o.lookup(name); f != nil {
			got = f.Value.String()
		}
		if got == "" {
			return config.Invalid(name, "%s", flagWords.Replace(fe.Rule))
		}
		return config.Invalid(name, "%s (got %s)", flagWords.Replace(fe.Rule), got)
	}
	return fmt.Errorf("%w: invalid settings of the %s: %w", config.ErrUsage, component, err)
}

// lookup returns the flag of o's flag set that is called name, or nil.
func (o *options) lookup(name string) *flag.Flag {
	if o.fs == nil {
		return nil
	}
	return o.fs.Lookup(name)
}

// flagWords says a component's Go names for a setting's special values as
// the flags do.
var flagWords = strings.NewReplacer(
	"TimeoutOff", "0 (the server's setting)",
	"rate.Inf (no bound)", "0 (no bound)",
	", or GroupWaitOff", " (0: no grouping)",
	", or negative for none", " (0: none)",
	"MaxInFlightBodies", "--http-max-bodies",
)

// operatorBound returns the operator's invalid query field as a field
// error.
func operatorBound(err error) error {
	var oe *operator.Error
	if errors.As(err, &oe) && len(oe.Fields) > 0 {
		return &bounds.FieldError{Field: oe.Fields[0].Field, Rule: oe.Fields[0].Reason}
	}
	return err
}

// given is the value v of flag name for a field that reads 0 as its
// default. A flag has its default already, so a flag given 0 means 0,
// which no such field accepts: it reaches the field as -1, which the
// field's bound refuses (the error prints the flag's own value). A flag
// the role does not have leaves the field 0: its default.
func given[T ~int | ~int64](o *options, name string, v T) T {
	if v == 0 && o.registered[name] {
		return -1
	}
	return v
}

// offOr is a flag's duration d for a field whose value off turns the
// setting off: the flag's 0 is off, a negative d is refused (below off,
// outside every such field's bound).
func offOr(d, off time.Duration) time.Duration {
	switch {
	case d == 0:
		return off
	case d < 0:
		return min(d, off-1)
	}
	return d
}

// gatherOrOff is --relay-gather as dispatcher.Config.FeedGather: 0 is off
// (FeedGather's negative); a negative flag, which FeedGather would read as
// off too, reaches it beyond its bound to be refused.
func gatherOrOff(d time.Duration) time.Duration {
	switch {
	case d == 0:
		return -1
	case d < 0:
		return dispatcher.FeedGatherMax + 1
	}
	return d
}

// migrateConfig is the store's retentions (--outbox-retention,
// --event-retention).
func (o *options) migrateConfig() *store.MigrateConfig {
	return &store.MigrateConfig{OutboxRetention: given(o, "outbox-retention", o.outboxRetention), EventRetention: o.eventRetention}
}

// mongoOptions is the MongoDB store's options of the flags.
func (o *options) mongoOptions() *mongostore.Options {
	return &mongostore.Options{Database: o.mongoDB, EventsCollection: o.eventsColl, OutboxCollection: o.outboxColl,
		MaxPoolSize: uint64(given(o, "mongo-max-pool", o.mongoMaxPool))} //nolint:gosec // a negative pool size becomes one over the bound
}

// messageOptions is what the stream messages carry (--message-payload,
// --message-payload-max).
func (o *options) messageOptions() *outbox.MessageOptions {
	m := o.message
	m.PayloadMax = given(o, "message-payload-max", m.PayloadMax)
	return &m
}

// serverConfig is the HTTP server's bounds (--http-*).
func (o *options) serverConfig() *httpapi.ServerConfig {
	return &httpapi.ServerConfig{
		BodyTimeout:       given(o, "http-body-timeout", o.httpBodyTimeout),
		IdleTimeout:       given(o, "http-idle-timeout", o.httpIdleTimeout),
		WriteTimeout:      given(o, "http-write-timeout", o.httpWriteTimeout),
		MaxInFlightBodies: given(o, "http-max-bodies", o.httpMaxBodies),
		MaxClientBodies:   o.httpMaxClientBodies,
		MaxConns:          given(o, "http-max-conns", o.httpMaxConns),
		TLS:               o.tls,
	}
}

// httpConfig is the HTTP API's bounds (--max-body, --max-batch, …).
func (o *options) httpConfig() *httpapi.Config {
	return &httpapi.Config{
		MaxBody:        given(o, "max-body", o.maxBody),
		MaxBatch:       given(o, "max-batch", o.maxBatch),
		MaxValues:      given(o, "max-values", o.maxValues),
		MaxDecodes:     given(o, "http-max-decodes", o.httpMaxDecodes),
		RequestTimeout: given(o, "request-timeout", o.requestTimeout),
		ReadOnly:       o.uiReadOnly,
	}
}

// committerConfig is ingest's group commit (--ingest-group-*).
func (o *options) committerConfig() *outbox.CommitterConfig {
	return &outbox.CommitterConfig{
		GroupWait: offOr(o.ingestGroupWait, outbox.GroupWaitOff), GroupMax: given(o, "ingest-group-max", o.ingestGroupMax),
		GroupMaxBytes: given(o, "ingest-group-max-bytes", o.ingestGroupMaxBytes), GroupTimeout: given(o, "request-timeout", o.requestTimeout),
	}
}

// historyConfig is the console's history (--ui-sample-every).
func (o *options) historyConfig() *ostatus.HistoryConfig {
	return &ostatus.HistoryConfig{Every: given(o, "ui-sample-every", o.uiSampleEvery)}
}

// auditConfig is the read model's audit (--audit-every, --audit-sample).
func (o *options) auditConfig() *operator.AuditConfig {
	return &operator.AuditConfig{Every: o.auditEvery, Sample: given(o, "audit-sample", o.auditSample), EventRetention: o.eventRetention}
}

// dispatcherConfig is the dispatcher's settings of the flags (the stream,
// the partitions and the metrics are the role's).
func (o *options) dispatcherConfig() *dispatcher.Config {
	return &dispatcher.Config{
		Partitions: given(o, "partitions", o.partitions), BatchSize: given(o, "relay-batch", o.relayBatch), FeedGather: gatherOrOff(o.relayGather),
		LeaseTTL: given(o, "lease-ttl", o.leaseTTL), OutboxRetention: given(o, "outbox-retention", o.outboxRetention), EventRetention: o.eventRetention,
		BreakerFailures: given(o, "breaker-failures", o.breakerFailures), BreakerTimeout: given(o, "breaker-timeout", o.breakerTimeout), StreakLimit: given(o, "error-streak-limit", o.streakLimit),
		StreamRetention: given(o, "stream-retention", o.streamRetention), MemoryHigh: given(o, "redis-memory-high", o.memoryHigh),
		EventRetentionTypes: o.eventRetentionTypes, EventRetentionSources: o.eventRetentionSources,
	}
}

// workerConfig is a worker's settings of the flags (the stream, the
// partition, the consumer, the projector and the metrics are the role's).
func (o *options) workerConfig() *worker.Config {
	replayRate := rate.Limit(o.replayRate)
	if o.replayRate == 0 {
		replayRate = rate.Inf
	}
	return &worker.Config{
		Partitions: given(o, "partitions", o.partitions), Group: o.group,
		BatchSize: given(o, "batch-size", o.batchSize.n), AutoBatch: o.batchSize.auto, ProjectionTarget: given(o, "projection-target", o.projectionTarget),
		LockTimeout: offOr(o.lockTimeout, worker.TimeoutOff), StatementTimeout: offOr(o.statementTimeout, worker.TimeoutOff),
		ReplayRate: replayRate, ProjectionRate: rate.Limit(o.projectionRate),
		ClaimIdle: given(o, "claim-idle", o.claimIdle), MaxDeliveries: given(o, "max-deliveries", o.maxDeliveries), Ordered: o.ordered, LeaseTTL: given(o, "lease-ttl", o.leaseTTL),
		RecordBackoff: given(o, "retry-backoff", o.retryBackoff), ConsumerExpiry: given(o, "consumer-expiry", o.consumerExpiry),
		BreakerFailures: given(o, "breaker-failures", o.breakerFailures), BreakerTimeout: given(o, "breaker-timeout", o.breakerTimeout), StreakLimit: given(o, "error-streak-limit", o.streakLimit),
		LeavesSynced: !o.ownsSynced,
	}
}

// reconcilerConfig is the reconciler's settings of the flags (the metrics
// are the role's).
func (o *options) reconcilerConfig() *reconciler.Config {
	cfg := &reconciler.Config{
		Stream: o.stream, Partitions: given(o, "partitions", o.partitions), Routes: o.routes.routes, MinAge: given(o, "min-age", o.minAge), RequeueAfter: given(o, "requeue-after", o.requeueAfter),
		Limit: given(o, "limit", o.limit), MaxRequeues: given(o, "max-requeues", o.maxRequeues), Every: o.every, Lease: o.reconcileLease,
		Message: &o.message,
	}
	if o.every == 0 { // one sweep, run by a schedule
		cfg.Interval = given(o, "expected-every", o.expectedEvery)
	}
	return cfg
}
