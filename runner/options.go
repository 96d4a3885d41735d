package runner

import (
	"crypto/tls"
	"crypto/x509"
	"flag"
	"fmt"
	"net"
	"net/url"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/outboxd/outboxd/dispatcher"
	"github.com/outboxd/outboxd/internal/config"
	"github.com/outboxd/outboxd/internal/failpolicy"
	"github.com/outboxd/outboxd/internal/httpapi"
	"github.com/outboxd/outboxd/internal/operator"
	"github.com/outboxd/outboxd/internal/redact"
	ostatus "github.com/outboxd/outboxd/internal/status"
	"github.com/outboxd/outboxd/internal/stream"
	"github.com/outboxd/outboxd/outbox"
	"github.com/outboxd/outboxd/projection"
	"github.com/outboxd/outboxd/reconciler"
	"github.com/outboxd/outboxd/store"
	"github.com/outboxd/outboxd/store/mongostore"
	"github.com/outboxd/outboxd/store/sqlitestore"
	"github.com/outboxd/outboxd/worker"
)

// Defaults of the common flags.
const (
	StoreDefault       = "sqlite:data/outboxd.db"
	RedisURLDefault    = "redis://127.0.0.1:6379/0"
	PostgresURLDefault = "postgres://outboxd:outboxd@127.0.0.1:5432/outboxd?sslmode=disable"
	HTTPAddrDefault    = "127.0.0.1:8080"
	ServerDefault      = "http://127.0.0.1:8080"
	ShutdownDefault    = 30 * time.Second
	// devEvery is how often dev sweeps unless told otherwise.
	devEvery = time.Minute
	// ExpectedEveryDefault is the default --expected-every: a cron job of
	// one sweep every 5 minutes (the default --min-age).
	ExpectedEveryDefault = 5 * time.Minute
)

// options holds every flag; each role registers the groups it reads.
type options struct {
	role *role

	store, mongoDB, redisURL, postgresURL string
	stream, group, httpAddr, logLevel     string
	shutdownTimeout                       time.Duration
	// mongoMaxPool is the MongoDB driver's pool size per server.
	mongoMaxPool int
	// eventsColl and outboxColl name the originals' and the entries'
	// MongoDB collections or SQLite tables (--events-collection,
	// --outbox-collection).
	eventsColl, outboxColl string
	// partitions is --partitions: the stream's number of partitions.
	partitions int
	// partitionsTo is `partitions switch --to`.
	partitionsTo int
	// storeOnly, readModelOnly: what `migrate` applies (both by default).
	storeOnly, readModelOnly bool
	// projection is --projection, a SQL projection file; projectionFile is
	// it, parsed by validate (nil without the flag).
	projection     string
	projectionFile *projection.File
	// ownsSynced is --owns-synced: this worker group sets syncedAt.
	ownsSynced bool
	// message is --message-payload and --message-payload-max: what the
	// stream messages that ingest, the reconciler and replays write carry.
	message outbox.MessageOptions
	// routes is --route: the streams of routed types.
	routes routeList

	// http
	httpBodyTimeout, httpIdleTimeout time.Duration
	httpWriteTimeout                 time.Duration
	httpMaxBodies, httpMaxConns      int
	uiReadOnly                       bool
	uiSampleEvery                    time.Duration
	pprof                            bool
	// tlsCert and tlsKey serve HTTPS; tls is their configuration, loaded
	// by validate.
	tlsCert, tlsKey string
	tls             *tls.Config
	// redisCAFile is trusted for a rediss:// --redis-url; redisCAs is it
	// read by validate.
	redisCAFile string
	redisCAs    *x509.CertPool
	// redisCluster and redisSentinel are --redis-cluster and
	// --redis-sentinel-master: how --redis-url is read (redisTopology).
	redisCluster  bool
	redisSentinel string

	// access: the tokens of the serving roles, each from its flag or its
	// file (validate reads the files; authToken is the operator's too, and
	// the token the operator commands send).
	authToken, operatorToken, viewerToken, ingestToken tokenFlag
	allowNoAuth                                        bool
	// clients are the named ingest clients (--ingest-client).
	clients clientList
	// args are the flags given as arguments (argFlags), not by a variable.
	args map[string]bool

	// ingest
	maxBody  int64
	maxBatch int
	// maxValues, httpMaxDecodes and httpMaxClientBodies are --max-values,
	// --http-max-decodes and --http-max-client-bodies (0: half of
	// httpMaxBodies).
	maxValues, httpMaxDecodes, httpMaxClientBodies int
	// requestTimeout bounds the store work of one ingest request.
	requestTimeout time.Duration
	// ingestGroupWait, ingestGroupMax and ingestGroupMaxBytes bound the
	// groups of single-event requests that share one store transaction (0
	// wait: no grouping).
	ingestGroupWait     time.Duration
	ingestGroupMax      int
	ingestGroupMaxBytes int

	// eventRetentionTypes and eventRetentionSources keep the synced
	// originals of a type, of a source, for their own time (retention.go).
	eventRetentionTypes, eventRetentionSources retentions

	// dispatch
	outboxRetention time.Duration
	// eventRetention keeps synced originals this long (0: forever):
	// dispatch deletes older ones, migrate sets MongoDB's TTL index, and
	// verify (work, dev) does not count rows older than it as drift.
	eventRetention time.Duration
	leaseTTL       time.Duration
	ordered        bool
	relayBatch     int
	relayGather    time.Duration
	// streamRetention keeps acknowledged stream entries this long before
	// the dispatcher's leader trims them; memoryHigh is the high-water
	// mark of Redis's memory, in percent of maxmemory, above which the
	// relay holds.
	streamRetention time.Duration
	memoryHigh      int

	// work
	consumer string
	// batchSize is --batch-size: a number, or auto (the tuning loop).
	batchSize        batchSize
	projectionTarget time.Duration
	// lockTimeout and statementTimeout are PostgreSQL's on the worker's
	// transactions (0: the server's).
	lockTimeout, statementTimeout time.Duration
	// replayRate bounds the replay lane's entries per second in one work
	// process (0: no bound).
	replayRate int
	// projectionRate bounds the group's live projection, events a second
	// (0: no bound).
	projectionRate int
	// dlqWebhook is called for each new dead letter ("": none).
	dlqWebhook string
	// concurrency is the number of batch loops (workers) of the process.
	concurrency    int
	claimIdle      time.Duration
	maxDeliveries  int
	retryBackoff   time.Duration
	consumerExpiry time.Duration

	// failure policy (dispatch and work)
	breakerFailures int
	breakerTimeout  time.Duration
	streakLimit     int

	// reconcile
	minAge, requeueAfter, every time.Duration
	limit, maxRequeues          int
	jsonOut                     bool
	metricsFile                 string
	// reconcileLease: only the replica holding the reconciler's lease
	// sweeps (--lease).
	reconcileLease bool
	// expectedEvery is the period of the schedule that runs one sweep
	// (--expected-every), exported for the overdue alert.
	expectedEvery time.Duration
	// auditEvery and auditSample: the read model's audit, wherever the
	// reconciler runs as a service (0: off).
	auditEvery  time.Duration
	auditSample int
	// redrive is --redrive and --hold-category: the dead letters replayed
	// by themselves (their originals redriven), where the reconciler runs as a service.
	redrive operator.RedrivePolicy

	// operator commands
	server          string
	class           string
	stage, pausedBy string
	// dlq list's filters beside --category, --code, --source and --device.
	dlqError, eventType, since, until, payloadField string
	category, code                                  string
	ids                                             idList
	entities                                        idList
	entityRanges                                    idList
	ranges                                          []operator.EntityRange // entityRanges parsed
	all, yes                                        bool
	from, to, by                                    string
	source, device, state                           string
	dryRun, rebuild, repair                         bool
	chunk                                           int
	// resume is the --resume token of replay and verify, resumed its
	// decoded state (checked to be this command's).
	resume  string
	resumed *resumeToken

	registered map[string]bool
	// fs is the flag set o was parsed by (the errors print a flag's value
	// as it reads).
	fs *flag.FlagSet
}

func newFlagSet(r *role) (*flag.FlagSet, *options) {
	o := &options{role: r}
	fs := flag.NewFlagSet("outboxd "+r.name, flag.ContinueOnError)
	fs.StringVar(&o.logLevel, "log-level", "info", "log level: debug, info, warn, error")
	if r.serve || r.store {
		fs.DurationVar(&o.shutdownTimeout, "shutdown-timeout", ShutdownDefault, "grace period for in-flight work on SIGINT/SIGTERM")
	}
	for _, g := range r.flags {
		switch g {
		case gStore:
			fs.StringVar(&o.store, "store", StoreDefault, "system of record: sqlite:PATH, mongodb://… or mongodb+srv://… (a replica set), "+mongostore.LungoMemory+" (dev only)")
			fs.StringVar(&o.mongoDB, "mongo-db", mongostore.DatabaseDefault, "MongoDB database (mongodb stores)")
			fs.StringVar(&o.eventsColl, "events-collection", mongostore.EventsCollection, "collection (MongoDB) or table (SQLite) of the originals, to sit beside a service's own in --mongo-db or the sqlite: file (every role of a deployment must name the same)")
			fs.StringVar(&o.outboxColl, "outbox-collection", mongostore.OutboxCollection, "collection (MongoDB) or table (SQLite) of the outbox entries (every role of a deployment must name the same)")
			fs.IntVar(&o.mongoMaxPool, "mongo-max-pool", mongostore.MaxPoolSizeDefault, "most connections to each MongoDB server (mongodb stores; replaces the URI's maxPoolSize)")
		case gRedis:
			fs.StringVar(&o.redisURL, "redis-url", RedisURLDefault, "Redis URL (rediss://… for TLS)")
			fs.StringVar(&o.redisCAFile, "redis-ca-file", "", "PEM certificates of the authorities a rediss:// --redis-url is trusted by, besides the system's")
			fs.BoolVar(&o.redisCluster, "redis-cluster", false, "Redis is a Cluster: --redis-url is a seed list, redis://h1:p1?addr=h2:p2&addr=h3:p3 (needs --partitions 2 or more; see docs/operations.md, Redis Cluster)")
			fs.StringVar(&o.redisSentinel, "redis-sentinel-master", "", "reach Redis through Sentinel: the master's name; --redis-url names the Sentinels, redis://s1:26379?addr=s2:26379")
			fs.StringVar(&o.stream, "stream", outbox.StreamDefault, "Redis stream")
			fs.StringVar(&o.group, "group", stream.GroupDefault, "Redis consumer group")
			o.partitionsFlag(fs)
		case gPostgres:
			fs.StringVar(&o.postgresURL, "postgres-url", PostgresURLDefault, "PostgreSQL URL of the read model")
		case gHTTP:
			fs.StringVar(&o.httpAddr, "http-addr", HTTPAddrDefault, "HTTP listen address (API, /healthz, /readyz, /metrics); empty disables it for roles without the API")
			fs.DurationVar(&o.httpBodyTimeout, "http-body-timeout", httpapi.BodyTimeoutDefault, "longest a client may take to send a request body (then 408)")
			fs.DurationVar(&o.httpIdleTimeout, "http-idle-timeout", httpapi.IdleTimeoutDefault, "close keep-alive connections idle this long")
			fs.IntVar(&o.httpMaxBodies, "http-max-bodies", httpapi.MaxInFlightBodiesDefault, fmt.Sprintf("most request bodies read at once (more get 503), which bounds their memory to %d × this × --max-body (docs/deploy.md)", httpapi.IngestMemoryPerBody))
			fs.IntVar(&o.httpMaxClientBodies, "http-max-client-bodies", 0, "most of --http-max-bodies one client may hold at once (more get 503): a named ingest client by its name, others by their address (0: half of --http-max-bodies; behind a proxy, give --http-max-bodies or name the clients)")
			fs.DurationVar(&o.httpWriteTimeout, "http-write-timeout", httpapi.WriteTimeoutDefault, "longest the writing of one answer may take once it starts: a client that reads it slower is cut off")
			fs.IntVar(&o.httpMaxConns, "http-max-conns", httpapi.MaxConnsDefault(), fmt.Sprintf("most open HTTP connections, by default half the open-file limit (at most %d): at the cap the longest-idle one is closed to make room, and with every one busy /healthz and /readyz are still answered on %d more", httpapi.MaxConnsCeiling, httpapi.ProbeReserve))
			fs.StringVar(&o.tlsCert, "tls-cert", "", "serve HTTPS (TLS 1.2 or later) with this PEM certificate (chain), with --tls-key")
			fs.StringVar(&o.tlsKey, "tls-key", "", "the PEM private key of --tls-cert")
			fs.BoolVar(&o.uiReadOnly, "ui-read-only", false, "the console at /ui shows no action, and the admin API refuses those that change something (403)")
			fs.DurationVar(&o.uiSampleEvery, "ui-sample-every", ostatus.HistoryEveryDefault, "how often the console's charts sample the status (GET /v1/status/history keeps 120 samples)")
			fs.BoolVar(&o.pprof, "pprof", false, "serve Go's profiles (net/http/pprof) under /debug/pprof/ on --http-addr to the operator token (to anyone when no token is set), never the command line: for benchmarks and debugging")
		case gAuth:
			o.authToken.register(fs, "auth-token", "the operator token (the same as --operator-token)", false)
			o.operatorToken.register(fs, "operator-token", "bearer token of every route, the admin actions included", true)
			o.viewerToken.register(fs, "viewer-token", "bearer token of every read (the status, the admin listings, the journey, the console without actions)", true)
			o.ingestToken.register(fs, "ingest-token", "bearer token of POST /v1/events and POST /v1/events:batch (the ingest client \"default\")", true)
			o.clientFlags(fs)
			fs.BoolVar(&o.allowNoAuth, "allow-no-auth", false, "serve the API without a token on an address other than loopback, and to any Host (by default a role with no token refuses a non-loopback --http-addr and answers only a Host naming a loopback address)")
		case gIngest:
			if fs.Lookup("stream") == nil { // the stream the outbox entries are for
				fs.StringVar(&o.stream, "stream", outbox.StreamDefault, "Redis stream the outbox entries are relayed to")
				o.partitionsFlag(fs)
			}
			o.messageFlags(fs)
			o.routeFlag(fs)
			fs.Int64Var(&o.maxBody, "max-body", httpapi.MaxBodyDefault, fmt.Sprintf("request body limit in bytes (at most %d: no body may become a MongoDB document over 16 MiB)", httpapi.MaxBodyMax))
			fs.IntVar(&o.maxBatch, "max-batch", httpapi.MaxBatchDefault, "most events in one batch request")
			fs.IntVar(&o.maxValues, "max-values", httpapi.MaxValuesDefault, "most JSON values in one ingest body, the payloads' included (more get 413)")
			fs.IntVar(&o.httpMaxDecodes, "http-max-decodes", httpapi.MaxDecodesDefault, "most ingest bodies decoded and validated at once (others wait their turn); by default one per core")
			fs.DurationVar(&o.requestTimeout, "request-timeout", httpapi.RequestTimeoutDefault, "longest an ingest request may wait for the store (503 with Retry-After beyond)")
			fs.DurationVar(&o.ingestGroupWait, "ingest-group-wait", outbox.GroupWaitDefault, "longest a POST /v1/events waits for concurrent ones to share its store transaction (0: each request its own transaction)")
			fs.IntVar(&o.ingestGroupMax, "ingest-group-max", outbox.GroupMaxDefault, "most events in one shared ingest transaction")
			fs.IntVar(&o.ingestGroupMaxBytes, "ingest-group-max-bytes", outbox.GroupMaxBytesDefault, "most bytes (as the store holds them: BSON on MongoDB) in one shared ingest transaction; a larger event is refused (413)")
		case gDispatch:
			fs.DurationVar(&o.outboxRetention, "outbox-retention", store.OutboxRetentionDefault, "how long dispatched outbox entries are kept")
			o.eventRetentionFlag(fs)
			o.retentionByKeyFlags(fs)
			if r.serve {
				o.routeFlag(fs)
				o.leaseTTLFlag(fs)
				fs.IntVar(&o.relayBatch, "relay-batch", dispatcher.BatchSizeDefault, "outbox entries relayed by one pipelined XADD, one dispatchedAt write and one checkpoint")
				fs.DurationVar(&o.relayGather, "relay-gather", dispatcher.FeedGatherDefault, "after a commit wakes the idle relay, wait this long for more before reading, so a light load is relayed, marked dispatched and projected in fewer batches (0: read each commit at once; SQLite store)")
				fs.DurationVar(&o.streamRetention, "stream-retention", dispatcher.StreamRetentionDefault, "keep acknowledged stream entries this long, then trim them (never one a consumer group has not acknowledged)")
				fs.IntVar(&o.memoryHigh, "redis-memory-high", dispatcher.MemoryHighDefault, "percent of Redis's maxmemory above which the relay holds until trimming frees memory (100: only when Redis refuses a write)")
			}
		case gWork:
			o.eventRetentionFlag(fs)
			o.messageFlags(fs)
			o.routeFlag(fs) // the replays this instance serves
			fs.BoolVar(&o.ownsSynced, "owns-synced", true, "this worker's group owns the originals' syncedAt and syncFailure (what the reconciler sweeps by); with several read models on one stream (each its own --group), give it to exactly one: the others project and acknowledge only (docs/projections.md)")
			o.projectionFlag(fs)
			fs.StringVar(&o.consumer, "consumer", "", "consumer name (default: host-pid)")
			o.batchSize.n = worker.BatchSizeDefault
			fs.Var(&o.batchSize, "batch-size", fmt.Sprintf("stream entries per batch (1 to %d), or auto: between %d and %d, tuned to keep the p95 of the projection under --projection-target",
				worker.BatchSizeMax, worker.AutoBatchMin, worker.AutoBatchMax))
			fs.DurationVar(&o.projectionTarget, "projection-target", worker.ProjectionTargetDefault, fmt.Sprintf("with --batch-size auto, the projection time whose p95 the batch size keeps under (%s to %s)",
				worker.ProjectionTargetShortest, worker.ProjectionTargetLongest))
			fs.DurationVar(&o.lockTimeout, "lock-timeout", worker.LockTimeoutDefault, "PostgreSQL lock_timeout of every projection transaction; one that waits longer for a lock is counted and retried (0: the server's setting)")
			fs.DurationVar(&o.statementTimeout, "statement-timeout", worker.StatementTimeoutDefault, "PostgreSQL statement_timeout of every projection transaction (0: the server's setting)")
			fs.StringVar(&o.dlqWebhook, "dlq-webhook", "", "an http(s) URL that receives a JSON POST for each new dead letter, retried 5 times with backoff (outboxd_dlq_hook_*)")
			fs.IntVar(&o.projectionRate, "projection-rate", 0, "most events per second the whole consumer group projects from the live stream, shared through Redis by its workers in every process and partition (0: no bound)")
			fs.IntVar(&o.replayRate, "replay-rate", int(worker.ReplayRateDefault), "most entries per second this process reads from the replay lane, which it reads only when the stream has nothing for it (0: no bound)")
			fs.IntVar(&o.concurrency, "concurrency", 0, fmt.Sprintf("batch loops (workers, each a consumer of the group) in this process, sharing one PostgreSQL pool of this many connections plus %d (1 to %d); 0 picks one per core, at most what a pool_max_conns of --postgres-url leaves per partition", poolSpare, ConcurrencyMax))
			fs.DurationVar(&o.claimIdle, "claim-idle", worker.ClaimIdleDefault, "take over pending entries untouched this long (a dead or wedged consumer's; live workers touch theirs)")
			fs.IntVar(&o.maxDeliveries, "max-deliveries", worker.MaxDeliveriesDefault, "failed deliveries of a record before it is dead-lettered (outages never count)")
			fs.DurationVar(&o.retryBackoff, "retry-backoff", worker.RecordBackoffDefault, "pause before a failing record's second delivery, doubled for each further one (with jitter)")
			fs.DurationVar(&o.consumerExpiry, "consumer-expiry", worker.ConsumerExpiryDefault, "remove other consumers idle this long with nothing pending from the group")
			fs.BoolVar(&o.ordered, "ordered", false, "project each partition in stream order (one device's events in the order written): one worker at a time owns a partition through a store lease (--lease-ttl), a failing entry holds only its device's later ones until it goes through or is dead-lettered; every work process of the group must use it")
			o.leaseTTLFlag(fs)
		case gReconcile:
			o.routeFlag(fs)
			o.projectionFlag(fs) // the read model the audit checks
			o.messageFlags(fs)
			fs.DurationVar(&o.minAge, "min-age", reconciler.MinAgeDefault, "only originals older than this are candidates")
			fs.DurationVar(&o.requeueAfter, "requeue-after", reconciler.RequeueAfterDefault, "a requeued original is a candidate again after this")
			fs.IntVar(&o.limit, "limit", reconciler.LimitDefault, "most originals per sweep")
			fs.DurationVar(&o.every, "every", 0, "sweep every D as a service, on every replica (0: one sweep, then exit)")
			fs.BoolVar(&o.reconcileLease, "lease", false, "with --every: sweep only on the replica that holds the reconciler's lease, one at a time (default: every replica sweeps; per-document claims keep each document published once)")
			fs.IntVar(&o.maxRequeues, "max-requeues", reconciler.MaxRequeuesDefault, "requeues of an original before the reconciler parks it as requeue_exhausted")
			fs.BoolVar(&o.jsonOut, "json", false, "print the sweep report as JSON")
			if r.serve {
				o.eventRetentionFlag(fs)
				fs.DurationVar(&o.auditEvery, "audit-every", operator.AuditEveryDefault, "where the reconciler runs as a service (reconcile --every, dev): compare a sample of synced originals with the read model this often (0: no audit)")
				fs.IntVar(&o.auditSample, "audit-sample", operator.AuditSampleDefault, "most synced originals one audit run compares (the newest first, then older windows in turn)")
				o.redriveFlags(fs)
			}
			if r.once != nil {
				fs.StringVar(&o.metricsFile, "metrics-file", "", "one sweep: write the metrics to this file at the end (Prometheus text format, for node_exporter's textfile collector)")
				fs.DurationVar(&o.expectedEvery, "expected-every", ExpectedEveryDefault, "one sweep: how often the schedule (cron) runs it, exported as outboxd_reconciler_interval_seconds: the alert OutboxdReconcilerSweepOverdue fires when no sweep ended for 3 × it (with --every the interval is --every)")
			}
		case gClient:
			fs.StringVar(&o.server, "server", ServerDefault, "URL of a running outboxd")
			o.authToken.register(fs, "auth-token", "bearer token of the running outboxd: the operator token, or the viewer token for the commands that change nothing (status, dlq list, replay --dry-run, verify)", true)
			fs.BoolVar(&o.jsonOut, "json", false, "print JSON instead of a table")
		case gDLQFilter:
			fs.StringVar(&o.category, "category", "", "only dead letters of this category (non_retryable, poison, infrastructure)")
			fs.StringVar(&o.code, "code", "", "only dead letters with this code")
		case gDLQList:
			fs.IntVar(&o.limit, "limit", dlqListDefault, "most dead letters to list")
			fs.StringVar(&o.dlqError, "error", "", "only dead letters whose error contains this text (case-insensitive)")
			fs.StringVar(&o.source, "source", "", "only dead letters of this source")
			fs.StringVar(&o.device, "device", "", "only dead letters of this device")
			fs.StringVar(&o.eventType, "type", "", "only dead letters whose original has this type")
			fs.StringVar(&o.since, "since", "", "only dead letters from this time on, RFC 3339")
			fs.StringVar(&o.until, "until", "", "only dead letters before this time, RFC 3339")
			fs.StringVar(&o.payloadField, "payload", "", "only dead letters whose original's payload has this field value: path=value (reading.unit=C)")
		case gDLQSelect:
			fs.Var(&o.ids, "id", "a dead letter's id (repeat it, or separate ids with commas)")
			fs.BoolVar(&o.all, "all", false, "every dead letter (of --category and --code when given)")
		case gSwitch:
			if fs.Lookup("stream") == nil {
				fs.StringVar(&o.stream, "stream", outbox.StreamDefault, "Redis stream whose number of partitions to change")
			}
			fs.IntVar(&o.partitionsTo, "to", 0, fmt.Sprintf("the new number of partitions (1 to %d)", outbox.PartitionsMax))
		case gPause:
			fs.StringVar(&o.stage, "stage", "", "the stage: relay (every partition), relay:P (partition P), projection or replay (the group's live projection or replay lane; projection:G for group G)")
			fs.StringVar(&o.pausedBy, "paused-by", "", "who pauses, kept with the pause (default: operator)")
		case gRetries:
			fs.StringVar(&o.class, "class", "", "the failure class whose halted retries to resume: "+strings.Join(failpolicy.Classes, ", "))
		case gConfirm:
			fs.BoolVar(&o.yes, "yes", false, "confirm: dropped dead letters are gone")
		case gWindow:
			fs.StringVar(&o.from, "from", "", "start of the window, RFC 3339 (inclusive)")
			fs.StringVar(&o.to, "to", "", "end of the window, RFC 3339 (exclusive)")
			fs.IntVar(&o.chunk, "chunk", operator.ChunkDefault, "originals per request")
			fs.StringVar(&o.resume, "resume", "", "continue an interrupted run after its last finished chunk: the token it printed (with the same arguments)")
		case gReplay:
			fs.StringVar(&o.by, "by", string(store.ByOccurred), "the time the window bounds: occurred or created")
			fs.StringVar(&o.source, "source", "", "only originals of this sourceKey")
			fs.StringVar(&o.device, "device", "", "only originals of this deviceKey (with --source)")
			fs.Var(&o.entities, "entity", "only originals of these entities, each sourceKey or sourceKey/deviceKey, replayed in turn (repeat it, or separate them with commas; not with --source)")
			fs.Var(&o.entityRanges, "entity-range", "only originals of the devices of a source between two deviceKeys, SOURCE/FROM..TO, both included, in byte order (dev-001..dev-099 holds dev-05, not dev-1), replayed in turn after --entity (repeat it, or separate them with commas; not with --source)")
			fs.StringVar(&o.eventType, "type", "", "only originals of this type")
			fs.StringVar(&o.state, "state", store.StateAny, "only originals in this state: pending, failed, synced or any")
			fs.BoolVar(&o.dryRun, "dry-run", false, "print how many originals the window holds; change nothing")
			fs.BoolVar(&o.rebuild, "rebuild", false, "remove the window's rows and their counts from the read model first (after a projection bug is fixed); needs --yes")
			fs.BoolVar(&o.yes, "yes", false, "confirm --rebuild (without it, replay --rebuild prints what it would remove and exits 2)")
		case gMigrate:
			fs.BoolVar(&o.storeOnly, "store-only", false, "apply only the store's schema (the system of record), not outboxd's PostgreSQL read model (a team with a read model of its own)")
			fs.BoolVar(&o.readModelOnly, "read-model-only", false, "apply only outboxd's PostgreSQL read model, not the store's schema")
		case gVerify:
			fs.BoolVar(&o.repair, "repair", false, "re-publish synced originals without a row and recompute drifted statistics rows; needs --yes")
			fs.BoolVar(&o.yes, "yes", false, "confirm --repair (without it, verify --repair checks, prints what it would repair and exits 2)")
		}
	}
	if slices.Contains(r.flags, gWork) || (slices.Contains(r.flags, gDispatch) && r.serve) {
		fs.IntVar(&o.breakerFailures, "breaker-failures", worker.BreakerFailuresDefault, "consecutive infrastructure failures that open a circuit breaker (PostgreSQL, the store, Redis)")
		fs.DurationVar(&o.breakerTimeout, "breaker-timeout", worker.BreakerTimeoutDefault, "how long an open circuit stays open before one probe; also the pause between attempts while retries are halted")
		fs.IntVar(&o.streakLimit, "error-streak-limit", worker.StreakLimitDefault, "the same error code this many times in a row halts automatic retries of its class and raises an alarm")
	}
	if r.name == "dev" {
		o.every = devEvery
		fs.Lookup("every").DefValue = devEvery.String()
	}
	o.registered = map[string]bool{}
	fs.VisitAll(func(f *flag.Flag) { o.registered[f.Name] = true })
	o.fs = fs
	return fs, o
}

// eventRetentionFlag registers --event-retention, once (dev has the groups
// of dispatch and work).
// messageFlags registers --message-payload and --message-payload-max,
// once (dev has the groups of every role that writes messages).
func (o *options) messageFlags(fs *flag.FlagSet) {
	if fs.Lookup("message-payload") == nil {
		fs.BoolVar(&o.message.Payload, "message-payload", false, "stream messages carry the original's payload (besides its id and type), so consumers need not fetch it; set it on every role that writes messages (ingest, reconcile, and the instance serving replays)")
		fs.IntVar(&o.message.PayloadMax, "message-payload-max", outbox.PayloadMaxDefault, "with --message-payload, the largest payload (bytes) a message carries; a larger one goes by reference (payloadRef: fetch GET /v1/events/{id})")
	}
}

// projectionFlag registers --projection, once (dev has the groups of work
// and reconcile): the workers project with the file, and verify, repair
// and the audit check the read model through it.
func (o *options) projectionFlag(fs *flag.FlagSet) {
	if fs.Lookup("projection") == nil {
		fs.StringVar(&o.projection, "projection", "", "a SQL projection file: the read model the workers project with instead of the demo one, and that verify, repair and the audit check "+
			"(give reconcile the work instances' file; docs/projections.md); its statements are prepared at start, and a bad one exits 2 naming its line")
	}
}

func (o *options) eventRetentionFlag(fs *flag.FlagSet) {
	if fs.Lookup("event-retention") == nil {
		fs.DurationVar(&o.eventRetention, "event-retention", 0, "keep synced originals (and so their idempotency keys) this long after ingest, then delete them: the dispatcher's leader on SQLite, "+
			"MongoDB's TTL index set by migrate; also the window in which a client's retry is recognised (0: keep them forever)")
	}
}

// leaseTTLFlag registers --lease-ttl, once (dev has the groups of dispatch
// and work): the dispatcher's lease and, with --ordered, the workers'
// partition leases.
func (o *options) leaseTTLFlag(fs *flag.FlagSet) {
	if fs.Lookup("lease-ttl") == nil {
		fs.DurationVar(&o.leaseTTL, "lease-ttl", dispatcher.LeaseTTLDefault, "dispatcher lease, and with --ordered each worker's partition lease: a standby takes over this long after the owner stops renewing")
	}
}

// EventRetentionShortest is the shortest --event-retention other than 0.
//
// Deprecated: the bound is the store's, store.EventRetentionShortest;
// EventRetentionShortest goes in the next version.
const EventRetentionShortest = store.EventRetentionShortest

// ConcurrencyMax is the largest --concurrency.
const ConcurrencyMax = 64

// defaultConcurrency is --concurrency 0's choice: one batch loop per core
// (1 to 2 × cores; a loop spends most of a batch waiting for
// PostgreSQL, but the worker's own CPU shares the cores with it), bounded
// by the pool: when --postgres-url sets pool_max_conns (poolMax > 0), at
// most what it leaves beside poolSpare for each of the partitions' loops;
// at least 1, at most ConcurrencyMax.
func defaultConcurrency(cores, poolMax, partitions int) int {
	n := cores
	if poolMax > 0 {
		n = min(n, (poolMax-poolSpare)/max(partitions, 1))
	}
	return min(max(n, 1), ConcurrencyMax)
}

// poolMaxConns is the pool_max_conns --postgres-url sets, or 0.
func poolMaxConns(postgresURL string) int {
	if !strings.Contains(postgresURL, "pool_max_conns") {
		return 0
	}
	cfg, err := pgxpool.ParseConfig(postgresURL)
	if err != nil {
		return 0 // the URL's own error is reported where it is opened
	}
	return int(cfg.MaxConns)
}

// poolSpare is how many PostgreSQL connections a work process keeps beside
// one per batch loop: the admin API's verify and journey, /readyz.
const poolSpare = 2

// batchSize is the value of --batch-size: a number of entries, or auto.
type batchSize struct {
	n    int
	auto bool
}

// batchAuto is the --batch-size that turns the tuning loop on.
const batchAuto = "auto"

func (b *batchSize) String() string {
	if b.auto {
		return batchAuto
	}
	return strconv.Itoa(b.n)
}

// Set reads a number or auto.
func (b *batchSize) Set(v string) error {
	if v == batchAuto {
		b.auto = true
		return nil
	}
	n, err := strconv.Atoi(v)
	if err != nil {
		return fmt.Errorf("must be a number of entries or %s (got %q)", batchAuto, v)
	}
	b.n, b.auto = n, false
	return nil
}

// storeKind tells the store a --store value selects: "sqlite" or "mongodb".
func storeKind(uri string) (string, string, error) {
	switch {
	case strings.HasPrefix(uri, "sqlite:"):
		path := strings.TrimPrefix(uri, "sqlite:")
		if path == "" {
			return "", "", fmt.Errorf("sqlite: needs a path (sqlite:data/outboxd.db)")
		}
		return "sqlite", path, nil
	case strings.HasPrefix(uri, "mongodb://"), strings.HasPrefix(uri, "mongodb+srv://"), strings.HasPrefix(uri, "lungo:"):
		if err := mongostore.ValidateURI(uri); err != nil {
			return "", "", err
		}
		return "mongodb", uri, nil
	case strings.HasPrefix(uri, "embedded:"):
		return "", "", fmt.Errorf("the embedded MongoDB engine (embedded:…) is no longer offered: use sqlite:PATH (the default, sqlite:data/outboxd.db) for a file, or %s", mongostore.LungoMemory)
	}
	return "", "", fmt.Errorf("must be sqlite:PATH, mongodb://…, mongodb+srv://… or %s (got %q)", mongostore.LungoMemory, redact.DSN(uri))
}

// validateCollections checks --events-collection and --outbox-collection,
// the MongoDB store's collections or the SQLite store's tables: names the
// store accepts that are not its other collections or tables.
func (o *options) validateCollections() error {
	kind, _, _ := storeKind(o.store)
	check := func(events, outbox string) error {
		if kind == "sqlite" {
			return (&sqlitestore.Options{EventsTable: events, OutboxTable: outbox}).Validate()
		}
		return (&mongostore.Options{EventsCollection: events, OutboxCollection: outbox}).Validate()
	}
	if err := check(o.eventsColl, ""); err != nil {
		return config.Invalid("events-collection", "%v", err)
	}
	if err := check(o.eventsColl, o.outboxColl); err != nil {
		return config.Invalid("outbox-collection", "%v", err)
	}
	return nil
}

// validate checks every registered flag; the error names the flag.
func (o *options) validate() error {
	has := o.registered
	if has["store"] {
		if _, _, err := storeKind(o.store); err != nil {
			return config.Invalid("store", "%v", err)
		}
		if o.store == mongostore.LungoMemory && o.role.name != "dev" {
			return config.Invalid("store", "%s lives inside one process, so only dev may use it; use sqlite:PATH or a replica set for %s", mongostore.LungoMemory, o.role.name)
		}
		if o.mongoDB == "" || strings.ContainsAny(o.mongoDB, "/\\. \"$") {
			return config.Invalid("mongo-db", "must be a MongoDB database name (got %q)", o.mongoDB)
		}
		if err := o.validateCollections(); err != nil {
			return err
		}
	}
	if o.storeOnly && o.readModelOnly {
		return config.Invalid("store-only", "cannot be combined with --read-model-only (without either, migrate applies both)")
	}
	if o.projection != "" {
		f, err := projection.Load(o.projection)
		if err != nil {
			return config.Invalid("projection", "%v", err)
		}
		o.projectionFile = f
	}
	if has["shutdown-timeout"] && o.shutdownTimeout <= 0 {
		return config.Invalid("shutdown-timeout", "must be positive")
	}
	if has["redis-url"] {
		if u, err := url.Parse(o.redisURL); err != nil || (u.Scheme != "redis" && u.Scheme != "rediss") {
			return config.Invalid("redis-url", "must be redis://host:port/db or rediss://… (got %q)", redact.DSN(o.redisURL))
		}
		if err := o.redisTopology().Validate(); err != nil {
			return config.Invalid("redis-cluster", "%v", err)
		}
		if o.redisCluster && o.partitions < 2 {
			return config.Invalid("redis-cluster", "needs --partitions 2 or more: one partition's keys keep their unpartitioned names, which share no hash tag, so the worker's MULTI/EXEC and scripts would span slots (see docs/operations.md, Redis Cluster)")
		}
		if o.stream == "" {
			return config.Invalid("stream", "must not be empty")
		}
		if o.group == "" {
			return config.Invalid("group", "must not be empty")
		}
	}
	if has["stream"] && o.stream == "" {
		return config.Invalid("stream", "must not be empty")
	}
	if err := o.validateRedrive(); err != nil {
		return err
	}
	if err := o.validateRoutes(); err != nil {
		return err
	}
	if has["postgres-url"] {
		if u, err := url.Parse(o.postgresURL); err != nil || (u.Scheme != "postgres" && u.Scheme != "postgresql") {
			return config.Invalid("postgres-url", "must be postgres://user:password@host:port/db (got %q)", redact.DSN(o.postgresURL))
		}
	}
	if has["http-addr"] && o.httpAddr != "" {
		if _, _, err := net.SplitHostPort(o.httpAddr); err != nil {
			return config.Invalid("http-addr", "must be host:port (got %q)", o.httpAddr)
		}
	}
	if has["http-addr"] && o.httpAddr == "" && o.role.api {
		return config.Invalid("http-addr", "must not be empty for %s, which serves the API", o.role.name)
	}
	if err := o.validateAccess(); err != nil {
		return err
	}
	if err := o.validateTLS(); err != nil {
		return err
	}
	if has["server"] {
		if u, err := url.Parse(o.server); err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			return config.Invalid("server", "must be http://host:port or https://… (got %q)", redact.DSN(o.server))
		}
	}
	if has["lease"] && o.reconcileLease && o.every == 0 {
		return config.Invalid("lease", "needs --every: one sweep takes no lease")
	}
	if has["expected-every"] && o.every > 0 && o.expectedEvery != ExpectedEveryDefault {
		return config.Invalid("expected-every", "is for one sweep run by a schedule; with --every the expected interval is --every")
	}
	if err := o.validateOperator(); err != nil {
		return err
	}
	if has["concurrency"] && o.concurrency == 0 {
		o.concurrency = defaultConcurrency(runtime.GOMAXPROCS(0), poolMaxConns(o.postgresURL), max(o.partitions, 1))
	}
	if has["partitions"] {
		if err := o.flagError("stream", outbox.ValidatePartitions(o.partitions), map[string]string{"Partitions": "partitions"}); err != nil {
			return err
		}
	}
	if err := o.validateBounds(); err != nil {
		return err
	}
	// What no component config holds: the process's own number of batch
	// loops and the operator's choice of a class.
	switch {
	case has["concurrency"] && (o.concurrency < 1 || o.concurrency > ConcurrencyMax):
		return config.Invalid("concurrency", "must be between 1 and %d (got %d)", ConcurrencyMax, o.concurrency)
	case has["class"] && !slices.Contains(failpolicy.Classes, o.class):
		return config.Invalid("class", "is required: one of %s", strings.Join(failpolicy.Classes, ", "))
	}
	return nil
}

// validateOperator checks the flags of the operator commands.
func (o *options) validateOperator() error {
	has := o.registered
	if has["id"] && has["all"] {
		switch {
		case len(o.ids) == 0 && !o.all:
			return config.Invalid("id", "or --all is required: name the dead letters")
		case len(o.ids) > 0 && o.all:
			return config.Invalid("all", "cannot be combined with --id")
		case len(o.ids) > 0 && (o.category != "" || o.code != ""):
			return config.Invalid("id", "cannot be combined with --category or --code (they filter --all)")
		}
	}
	if has["yes"] && has["id"] && !o.yes { // dlq drop
		return config.Invalid("yes", "is required: dropped dead letters are gone (replay them instead with outboxd dlq replay)")
	}
	if has["from"] {
		var from, to time.Time
		required := has["by"] // replay needs a window, verify may check everything
		for _, f := range []struct {
			name string
			v    string
			t    *time.Time
		}{{"from", o.from, &from}, {"to", o.to, &to}} {
			if f.v == "" {
				if required {
					return config.Invalid(f.name, "is required: the window is [--from, --to)")
				}
				continue
			}
			t, err := time.Parse(time.RFC3339Nano, f.v)
			if err != nil {
				return config.Invalid(f.name, "must be an RFC 3339 time like 2026-11-29T09:00:00Z (got %q)", f.v)
			}
			*f.t = t
		}
		if !from.IsZero() && !to.IsZero() && !from.Before(to) {
			return config.Invalid("to", "must be after --from")
		}
	}
	if has["resume"] && o.resume != "" {
		if has["dry-run"] && o.dryRun {
			return config.Invalid("resume", "cannot be combined with --dry-run, which counts the whole window")
		}
		r, err := decodeResume(o.resume, o.role.name, o.summary(), o.fingerprint())
		if err != nil {
			return err
		}
		o.resumed = r
	}
	if has["by"] {
		if o.by != string(store.ByOccurred) && o.by != string(store.ByCreated) {
			return config.Invalid("by", "must be occurred or created (got %q)", o.by)
		}
		switch o.state {
		case store.StateAny, outbox.StatePending, outbox.StateFailed, outbox.StateSynced:
		default:
			return config.Invalid("state", "must be pending, failed, synced or any (got %q)", o.state)
		}
		if o.device != "" && o.source == "" {
			return config.Invalid("source", "is required with --device: a device is named within its source")
		}
		if err := o.parseEntityRanges(); err != nil {
			return err
		}
	}
	return nil
}

// parseEntityRanges reads replay's --entity-range values into o.ranges:
// a range without a source, with an empty bound or with FROM after TO is
// a usage error, before any request.
func (o *options) parseEntityRanges() error {
	o.ranges = o.ranges[:0]
	for _, v := range o.entityRanges {
		r, err := operator.ParseEntityRange(v)
		if err != nil {
			return config.Invalid("entity-range", "%s", operator.EntityRangeReason(err))
		}
		o.ranges = append(o.ranges, r)
	}
	if len(o.ranges) > 0 && (o.source != "" || o.device != "") {
		return config.Invalid("entity-range", "cannot be combined with --source or --device: the range names its source")
	}
	return nil
}

// summary is the command line of replay or verify without its connection
// flags: what a resume message repeats and a token records.
func (o *options) summary() string {
	parts := []string{o.role.name}
	add := func(flag, v, def string) {
		if v != def {
			parts = append(parts, "--"+flag, v)
		}
	}
	add("from", o.from, "")
	add("to", o.to, "")
	if o.registered["by"] {
		add("by", o.by, string(store.ByOccurred))
		add("source", o.source, "")
		add("device", o.device, "")
		add("state", o.state, store.StateAny)
		add("entity", o.entities.String(), "")
		add("entity-range", o.entityRanges.String(), "")
		add("type", o.eventType, "")
	}
	add("chunk", fmt.Sprint(o.chunk), fmt.Sprint(operator.ChunkDefault))
	for _, f := range []struct {
		name string
		on   bool
	}{{"rebuild", o.rebuild}, {"repair", o.repair}, {"yes", o.yes}} {
		if f.on {
			parts = append(parts, "--"+f.name)
		}
	}
	return strings.Join(parts, " ")
}

// fingerprint hashes what decides what replay or verify touches: the
// window (its times in UTC), the filters and whether it changes the read
// model. --chunk, --json and the connection flags are left out: a run may
// resume with other chunks, elsewhere.
func (o *options) fingerprint() string {
	norm := func(v string) string {
		if t, err := time.Parse(time.RFC3339Nano, v); err == nil {
			return t.UTC().Format(time.RFC3339Nano)
		}
		return v
	}
	parts := []string{o.role.name, norm(o.from), norm(o.to), o.by, o.source, o.device, o.state,
		fmt.Sprint(o.rebuild && o.yes), fmt.Sprint(o.repair && o.yes)}
	if len(o.entities) > 0 || len(o.entityRanges) > 0 || o.eventType != "" {
		// replay's entities, ranges and type (the cursor names an entity by
		// its place in them)
		parts = append(parts, o.entities.String(), o.entityRanges.String(), o.eventType)
	}
	return fingerprint(parts...)
}

// idList is a repeatable flag of ids; each value may hold several,
// separated by commas.
type idList []string

func (l *idList) String() string { return strings.Join(*l, ",") }

// Set adds the ids of v.
func (l *idList) Set(v string) error {
	for id := range strings.SplitSeq(v, ",") {
		if id = strings.TrimSpace(id); id != "" {
			*l = append(*l, id)
		}
	}
	return nil
}

func (o *options) String() string {
	return fmt.Sprintf("role=%s store=%s redis=%s postgres=%s", o.role.name,
		redact.DSN(o.store), redact.DSN(o.redisURL), redact.DSN(o.postgresURL))
}

// redisTopology is how --redis-url is read: --redis-cluster and
// --redis-sentinel-master.
func (o *options) redisTopology() stream.Topology {
	return stream.Topology{Cluster: o.redisCluster, SentinelMaster: o.redisSentinel}
}

// partitionsFlag registers --partitions, where the stream is named.
func (o *options) partitionsFlag(fs *flag.FlagSet) {
	fs.IntVar(&o.partitions, "partitions", outbox.PartitionsDefault, fmt.Sprintf(
		"partitions of the stream (1 to %d): each device's events go to one, each has its own dispatcher lease and Redis stream; every role of a deployment must use the number the store records (see docs/operations.md, Changing the number of partitions)", outbox.PartitionsMax))
}
