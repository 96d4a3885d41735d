package cli

import (
	"flag"
	"fmt"
	"net"
	"net/url"
	"strings"
	"time"

	"github.com/outboxd/outboxd/dispatcher"
	"github.com/outboxd/outboxd/internal/config"
	"github.com/outboxd/outboxd/internal/mongodb"
	"github.com/outboxd/outboxd/migrations"
	"github.com/outboxd/outboxd/outbox"
	"github.com/outboxd/outboxd/reconciler"
	"github.com/outboxd/outboxd/worker"
)

// Defaults of the common flags.
const (
	MongoURIDefault    = "embedded:data/outboxd.db"
	MongoDBDefault     = "outboxd"
	RedisURLDefault    = "redis://127.0.0.1:6379/0"
	PostgresURLDefault = "postgres://outboxd:outboxd@127.0.0.1:5432/outboxd?sslmode=disable"
	HTTPAddrDefault    = "127.0.0.1:8080"
	ShutdownDefault    = 30 * time.Second
)

// options holds every flag; each role registers the ones it reads.
type options struct {
	role string

	mongoURI, mongoDB, redisURL, postgresURL string
	stream, group, httpAddr, logLevel        string
	shutdownTimeout                          time.Duration

	// ingest
	authToken string
	maxBody   int64
	maxBatch  int

	// dispatch
	outboxRetention time.Duration
	leaseTTL        time.Duration

	// work
	consumer      string
	batchSize     int
	claimIdle     time.Duration
	maxDeliveries int

	// reconcile
	minAge, requeueAfter, every time.Duration
	limit                       int
	jsonOut                     bool

	registered map[string]bool
}

type flagGroup int

const (
	gMongo flagGroup = iota
	gRedis
	gPostgres
	gHTTP
	gAuth
	gIngest
	gDispatch
	gWork
	gReconcile
)

// roles lists each role's flag groups.
var roles = map[string][]flagGroup{
	"dev":       {gMongo, gRedis, gPostgres, gHTTP, gAuth, gIngest, gDispatch, gWork, gReconcile},
	"ingest":    {gMongo, gRedis, gHTTP, gAuth, gIngest},
	"dispatch":  {gMongo, gRedis, gHTTP, gDispatch},
	"work":      {gMongo, gRedis, gPostgres, gHTTP, gWork},
	"reconcile": {gMongo, gRedis, gReconcile},
	"migrate":   {gMongo, gPostgres, gDispatch},
	"status":    {gHTTP, gAuth},
}

func newFlagSet(role string) (*flag.FlagSet, *options) {
	o := &options{role: role}
	fs := flag.NewFlagSet("outboxd "+role, flag.ContinueOnError)
	fs.StringVar(&o.logLevel, "log-level", "info", "log level: debug, info, warn, error")
	for _, g := range roles[role] {
		switch g {
		case gMongo:
			fs.StringVar(&o.mongoURI, "mongo-uri", MongoURIDefault, "MongoDB: mongodb://… (replica set), embedded:memory or embedded:PATH (dev only)")
			fs.StringVar(&o.mongoDB, "mongo-db", MongoDBDefault, "MongoDB database")
			fs.DurationVar(&o.shutdownTimeout, "shutdown-timeout", ShutdownDefault, "grace period for in-flight work on SIGINT/SIGTERM")
		case gRedis:
			fs.StringVar(&o.redisURL, "redis-url", RedisURLDefault, "Redis URL")
			fs.StringVar(&o.stream, "stream", outbox.StreamDefault, "Redis stream")
			fs.StringVar(&o.group, "group", outbox.GroupDefault, "Redis consumer group")
		case gPostgres:
			fs.StringVar(&o.postgresURL, "postgres-url", PostgresURLDefault, "PostgreSQL URL of the read model")
		case gHTTP:
			fs.StringVar(&o.httpAddr, "http-addr", HTTPAddrDefault, "HTTP listen address (API, /healthz, /readyz, /metrics)")
		case gAuth:
			fs.StringVar(&o.authToken, "auth-token", "", "bearer token required on /v1/* (empty: no auth)")
		case gIngest:
			fs.Int64Var(&o.maxBody, "max-body", outbox.MaxBodyDefault, "request body limit in bytes")
			fs.IntVar(&o.maxBatch, "max-batch", outbox.MaxBatchDefault, "most events in one batch request")
		case gDispatch:
			fs.DurationVar(&o.outboxRetention, "outbox-retention", migrations.OutboxRetentionDefault, "how long dispatched outbox entries are kept")
			if role != "migrate" {
				fs.DurationVar(&o.leaseTTL, "lease-ttl", dispatcher.LeaseTTLDefault, "dispatcher lease: a standby takes over this long after the leader stops renewing")
			}
		case gWork:
			fs.StringVar(&o.consumer, "consumer", "", "consumer name (default: host-pid)")
			fs.IntVar(&o.batchSize, "batch-size", worker.BatchSizeDefault, "stream entries per batch")
			fs.DurationVar(&o.claimIdle, "claim-idle", worker.ClaimIdleDefault, "reclaim entries pending longer than this on other consumers")
			fs.IntVar(&o.maxDeliveries, "max-deliveries", worker.MaxDeliveriesDefault, "deliveries of a failing record before it is dead-lettered as poison")
		case gReconcile:
			fs.DurationVar(&o.minAge, "min-age", reconciler.MinAgeDefault, "only originals older than this are candidates")
			fs.DurationVar(&o.requeueAfter, "requeue-after", reconciler.RequeueAfterDefault, "a requeued original is a candidate again after this")
			fs.IntVar(&o.limit, "limit", reconciler.LimitDefault, "most originals per sweep")
			fs.DurationVar(&o.every, "every", 0, "sweep every D (0: one sweep, then exit)")
			fs.BoolVar(&o.jsonOut, "json", false, "print the sweep report as JSON")
		}
	}
	if role == "dev" {
		// dev runs the reconciler every minute unless told otherwise.
		o.every = time.Minute
		fs.Lookup("every").DefValue = o.every.String()
	}
	o.registered = map[string]bool{}
	fs.VisitAll(func(f *flag.Flag) { o.registered[f.Name] = true })
	return fs, o
}

// validate checks every registered flag; the error names the flag.
func (o *options) validate() error {
	has := o.registered
	if has["mongo-uri"] {
		if err := mongodb.ValidateURI(o.mongoURI); err != nil {
			return config.Invalid("mongo-uri", "%v", err)
		}
		if mongodb.IsEmbedded(o.mongoURI) && o.role != "dev" {
			return config.Invalid("mongo-uri", "%s: %v", o.mongoURI, mongodb.ErrEmbeddedNotAllowed)
		}
		if o.mongoDB == "" || strings.ContainsAny(o.mongoDB, "/\\. \"$") {
			return config.Invalid("mongo-db", "must be a MongoDB database name (got %q)", o.mongoDB)
		}
		if o.shutdownTimeout <= 0 {
			return config.Invalid("shutdown-timeout", "must be positive")
		}
	}
	if has["redis-url"] {
		if u, err := url.Parse(o.redisURL); err != nil || (u.Scheme != "redis" && u.Scheme != "rediss") {
			return config.Invalid("redis-url", "must be redis://host:port/db or rediss://… (got %q)", mongodb.Redact(o.redisURL))
		}
		if o.stream == "" {
			return config.Invalid("stream", "must not be empty")
		}
		if o.group == "" {
			return config.Invalid("group", "must not be empty")
		}
	}
	if has["postgres-url"] {
		if u, err := url.Parse(o.postgresURL); err != nil || (u.Scheme != "postgres" && u.Scheme != "postgresql") {
			return config.Invalid("postgres-url", "must be postgres://user:password@host:port/db (got %q)", mongodb.Redact(o.postgresURL))
		}
	}
	if has["http-addr"] && o.httpAddr != "" {
		if _, _, err := net.SplitHostPort(o.httpAddr); err != nil {
			return config.Invalid("http-addr", "must be host:port (got %q)", o.httpAddr)
		}
	}
	if has["max-body"] && o.maxBody <= 0 {
		return config.Invalid("max-body", "must be positive")
	}
	if has["max-batch"] && o.maxBatch <= 0 {
		return config.Invalid("max-batch", "must be positive")
	}
	if has["outbox-retention"] && o.outboxRetention < time.Second {
		return config.Invalid("outbox-retention", "must be at least 1s")
	}
	if has["lease-ttl"] && o.leaseTTL < dispatcher.LeaseTTLMin {
		return config.Invalid("lease-ttl", "must be at least %s", dispatcher.LeaseTTLMin)
	}
	if has["batch-size"] && (o.batchSize <= 0 || o.batchSize > worker.BatchSizeMax) {
		return config.Invalid("batch-size", "must be between 1 and %d", worker.BatchSizeMax)
	}
	if has["max-deliveries"] && o.maxDeliveries <= 0 {
		return config.Invalid("max-deliveries", "must be positive")
	}
	if has["claim-idle"] && o.claimIdle <= 0 {
		return config.Invalid("claim-idle", "must be positive")
	}
	if has["min-age"] && o.minAge < 0 {
		return config.Invalid("min-age", "must not be negative")
	}
	if has["requeue-after"] && o.requeueAfter <= 0 {
		return config.Invalid("requeue-after", "must be positive")
	}
	if has["limit"] && o.limit <= 0 {
		return config.Invalid("limit", "must be positive")
	}
	if has["every"] && o.every < 0 {
		return config.Invalid("every", "must not be negative")
	}
	return nil
}

func (o *options) String() string {
	return fmt.Sprintf("role=%s mongo=%s redis=%s postgres=%s", o.role,
		mongodb.Redact(o.mongoURI), mongodb.Redact(o.redisURL), mongodb.Redact(o.postgresURL))
}
