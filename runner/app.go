package runner

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"iter"
	"net"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/redis/go-redis/v9"
	"go.uber.org/zap"

	"github.com/outboxd/outboxd/dispatcher"
	"github.com/outboxd/outboxd/internal/config"
	"github.com/outboxd/outboxd/internal/dlqhook"
	"github.com/outboxd/outboxd/internal/httpapi"
	ometrics "github.com/outboxd/outboxd/internal/metrics"
	"github.com/outboxd/outboxd/internal/operator"
	"github.com/outboxd/outboxd/internal/readmodel"
	"github.com/outboxd/outboxd/internal/redact"
	ostatus "github.com/outboxd/outboxd/internal/status"
	"github.com/outboxd/outboxd/internal/storetrace"
	"github.com/outboxd/outboxd/internal/stream"
	"github.com/outboxd/outboxd/internal/tracing"
	"github.com/outboxd/outboxd/internal/tracing/instrument"
	"github.com/outboxd/outboxd/migrations"
	"github.com/outboxd/outboxd/outbox"
	"github.com/outboxd/outboxd/projection"
	"github.com/outboxd/outboxd/reconciler"
	"github.com/outboxd/outboxd/store"
	"github.com/outboxd/outboxd/store/mongostore"
	"github.com/outboxd/outboxd/store/sqlitestore"
	"github.com/outboxd/outboxd/worker"
)

// service is a long-running component (package startstop's contract).
type service interface {
	Start(ctx context.Context) error
	Stop(ctx context.Context) error
}

// app holds what a role opened; run closes it.
type app struct {
	o      *options
	role   *role
	log    *zap.Logger
	stdout io.Writer
	stderr io.Writer
	// set are Run's options.
	set *settings

	st store.Store
	// opened is st before it is wrapped for tracing (Env.Store).
	opened store.Store
	// writer writes ingest's events (the roles that serve ingest).
	writer *outbox.Writer
	rdb    redis.UniversalClient
	// rc is the pipeline's Redis over rdb (package stream).
	rc  *stream.Client
	pg  *pgxpool.Pool
	reg *prometheus.Registry
	// rec is the periodic reconciler of this process, if any: the status
	// shows its last report.
	rec *reconciler.Reconciler
	// admin is this process's operator actions (newAdmin), made once.
	admin *operator.Operator
	// history samples the status for the console's charts while the HTTP
	// server runs.
	history *ostatus.History
	// storeErr is why migrate could not open the store: it applies the
	// read model's schema all the same and reports the store's as not
	// applied.
	storeErr error
	// presentOnce looks up once whether the default read model's tables
	// exist (present).
	presentOnce sync.Once
	present     bool
	// auditOnce looks up once whether the audit's table exists
	// (auditTable).
	auditOnce  sync.Once
	auditTable bool
	// committer groups the single-event ingest requests into shared store
	// transactions while the HTTP server runs (api roles).
	committer *outbox.Committer
}

// run opens what the role needs, runs it, and closes everything.
func (a *app) run(ctx context.Context) error {
	r := a.role
	if r.store || r.redis || r.postgres {
		a.log.Info("starting", zap.String("config", a.o.String()))
	}
	for _, w := range a.o.accessWarnings() {
		a.log.Warn(w)
	}
	defer a.close()
	if err := a.open(ctx); err != nil {
		return err
	}
	if r.migrate {
		if err := a.applyMigrations(ctx); err != nil {
			return err
		}
	} else if a.st != nil && r.name != "migrate" {
		if err := a.st.CheckSchema(ctx); err != nil {
			if err = a.cliWording(err); !strings.Contains(err.Error(), "`outboxd migrate`") {
				err = fmt.Errorf("%w (run `outboxd migrate` with the same --store)", err)
			}
			return err
		}
	}
	if !a.o.readModelOnly {
		if err := a.checkPartitions(ctx); err != nil {
			return err
		}
	}
	if r.store || r.redis || r.postgres {
		env := a.env()
		for _, setup := range a.set.setups {
			if err := setup(ctx, env); err != nil {
				return fmt.Errorf("error in the program's setup (runner.WithSetup): %w", err)
			}
		}
	}
	if err := a.prepareProjection(ctx); err != nil {
		return err
	}
	if r.once != nil && (r.onceWhen == nil || r.onceWhen(a.o)) {
		return r.once(ctx, a)
	}
	var services []service
	if r.services != nil {
		var err error
		if services, err = r.services(a); err != nil {
			return err
		}
	}
	return a.serve(ctx, services)
}

// open opens the backends the role needs.
func (a *app) open(ctx context.Context) error {
	r := a.role
	a.reg = a.set.registry
	if a.reg == nil {
		a.reg = prometheus.NewRegistry()
	}
	for _, c := range []prometheus.Collector{collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{})} {
		if err := a.reg.Register(c); err != nil && !errors.As(err, new(prometheus.AlreadyRegisteredError)) {
			return err
		}
	}
	// migrate --read-model-only leaves the store alone: it does not open it.
	if r.store && !a.o.readModelOnly {
		err := a.openStore(ctx)
		if err == nil {
			if tracing.Enabled() {
				a.st = storetrace.Wrap(a.st)
			}
		} else if r.name != "migrate" || a.o.storeOnly || errors.Is(err, config.ErrUsage) {
			return err
		} else {
			// A plain migrate still applies the read model's schema
			// (applyMigrations says the store's was not).
			a.storeErr = err
		}
	}
	if r.redis {
		rdb, err := stream.OpenRedis(a.o.redisURL, a.o.redisTopology(), a.o.redisCAs)
		if err != nil {
			return config.Invalid("redis-url", "%v", err)
		}
		a.rdb = rdb
		rc, err := stream.NewClient(a.rdb, nil)
		if err != nil {
			return err
		}
		a.rc = rc
		a.checkEviction(ctx)
	}
	if r.postgres {
		cfg, err := pgxpool.ParseConfig(a.o.postgresURL)
		if err != nil {
			return fmt.Errorf("error opening PostgreSQL at %s: %w", redact.DSN(a.o.postgresURL), err)
		}
		instrument.Postgres(cfg)
		// One connection per batch loop (--concurrency) and a few to
		// spare, unless the URL sizes the pool itself (pool_max_conns).
		if a.o.concurrency > 0 && !strings.Contains(a.o.postgresURL, "pool_max_conns") {
			cfg.MaxConns = max(cfg.MaxConns, int32(a.o.concurrency*a.partitions()+poolSpare))
		}
		pool, err := pgxpool.NewWithConfig(ctx, cfg)
		if err != nil {
			return fmt.Errorf("error opening PostgreSQL at %s: %w", redact.DSN(a.o.postgresURL), err)
		}
		a.pg = pool
	}
	return nil
}

// openStore sets a.st and a.opened to the program's store
// (runner.WithStore) or the one --store names.
func (a *app) openStore(ctx context.Context) error {
	if a.set.store != nil {
		a.st, a.opened = a.set.store, a.set.store
		return nil
	}
	sqlite, err := a.sqliteOptions()
	if err != nil {
		return err
	}
	mongo := a.o.mongoOptions()
	mongo.AppName = "outboxd/" + a.role.name
	st, err := openStore(ctx, a.o.store, sqlite, mongo)
	if err != nil {
		return err
	}
	if ms, ok := st.(*mongostore.Store); ok {
		for _, w := range ms.Warnings() { // an arbiter in the replica set
			a.log.Warn(w)
		}
	}
	a.st, a.opened = st, st
	return nil
}

// openStore opens the store a --store value names; sqlite configures an
// SQLite store, mongo a MongoDB store.
func openStore(ctx context.Context, uri string, sqlite *sqlitestore.Options, mongo *mongostore.Options) (store.Store, error) {
	kind, target, err := storeKind(uri)
	if err != nil {
		return nil, config.Invalid("store", "%v", err)
	}
	if kind == "sqlite" {
		st, err := sqlitestore.Open(ctx, target, sqlite)
		if errors.Is(err, sqlitestore.ErrNotADatabase) {
			return nil, config.Invalid("store", "%v", err)
		}
		return st, err
	}
	return mongostore.Open(ctx, target, mongo)
}

// sqliteOptions returns the SQLite store's options, with the histograms
// of its writer by role (outboxd_store_writer_wait_seconds: the wait for
// the write connection and lock; outboxd_store_writer_held_seconds: the
// transaction that followed).
func (a *app) sqliteOptions() (*sqlitestore.Options, error) {
	f := ometrics.NewFactory(a.reg, "store", a.o.stream)
	buckets := prometheus.ExponentialBuckets(50e-6, 2, 15) // 50µs … 0.8s
	wait := f.HistogramVec("writer_wait_seconds", "Time an SQLite store write transaction waited for the write connection and lock, by role.", buckets, "role")
	held := f.HistogramVec("writer_held_seconds", "Time an SQLite store write transaction held the write connection (statements and commit), by role.", buckets, "role")
	if err := f.Err(); err != nil {
		return nil, err
	}
	return &sqlitestore.Options{EventsTable: a.o.eventsColl, OutboxTable: a.o.outboxColl, ObserveWriter: func(role string, waited, holding time.Duration) {
		wait.WithLabelValues(role).Observe(waited.Seconds())
		held.WithLabelValues(role).Observe(holding.Seconds())
	}}, nil
}

// roleService is a service whose context carries its role for the store
// (store.WithRole).
type roleService struct {
	service
	role string
}

// Start starts the service on ctx labelled with its role.
func (s roleService) Start(ctx context.Context) error {
	return s.service.Start(store.WithRole(ctx, s.role))
}

// withRole returns ctor with the service it makes labelled with role.
func withRole(role string, ctor func() (service, error)) func() (service, error) {
	return func() (service, error) {
		s, err := ctor()
		if err != nil || s == nil {
			return s, err
		}
		return roleService{service: s, role: role}, nil
	}
}

// close releases the backends, the store last.
func (a *app) close() {
	if a.pg != nil {
		a.pg.Close()
	}
	if a.rdb != nil {
		_ = a.rdb.Close()
	}
	if a.st != nil && a.set.store == nil { // the caller closes its own
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = a.st.Close(ctx)
	}
}

// applyMigrations applies the store's schema and outboxd's PostgreSQL read
// model (migrate's --store-only and --read-model-only pick one). Each is
// applied whatever became of the other, the store's first, and a failure
// says which part was applied and which was not.
func (a *app) applyMigrations(ctx context.Context) error {
	var storeErr, pgErr error
	switch {
	case a.o.readModelOnly:
	case a.st == nil:
		kind, _, _ := storeKind(a.o.store)
		storeErr = fmt.Errorf("the store's schema (%s) was not applied: the store could not be opened: %w", kind, a.storeErr)
	default:
		cfg := a.o.migrateConfig()
		cfg.EventRetention = a.o.ttlEventRetention() // the TTL index keeps the longest retention
		if storeErr = a.st.Migrate(ctx, cfg); storeErr != nil {
			storeErr = fmt.Errorf("the store's schema (%s) was not applied: %w", a.st.Kind(), a.cliWording(storeErr))
		} else {
			a.log.Info("store schema applied", zap.String("store", a.st.Kind()))
		}
	}
	if !a.o.storeOnly {
		n, err := migrations.Postgres(ctx, a.o.postgresURL)
		if err != nil {
			pgErr = fmt.Errorf("the PostgreSQL read model's schema was not applied (%s): %w", redact.DSN(a.o.postgresURL), err)
		} else {
			a.log.Info("read model schema applied", zap.Int("postgres_applied", n))
		}
	}
	switch {
	case storeErr != nil && pgErr == nil && !a.o.storeOnly:
		return fmt.Errorf("%w; the PostgreSQL read model's schema was applied (--store-only applies the store's alone)", storeErr)
	case pgErr != nil && storeErr == nil && !a.o.readModelOnly:
		return fmt.Errorf("%w; the store's schema was applied (--read-model-only applies the read model's alone)", pgErr)
	}
	return errors.Join(storeErr, pgErr)
}

// build returns the services the constructors make, in order.
func (a *app) build(ctors ...func() (service, error)) ([]service, error) {
	out := make([]service, 0, len(ctors))
	for _, c := range ctors {
		s, err := c()
		if err != nil {
			return nil, err
		}
		if s != nil { // a service turned off
			out = append(out, s)
		}
	}
	return out, nil
}

// projector returns the workers' projector: a Go projector given to the
// program (runner.WithProjector), the --projection file, or nil (the worker's
// default).
func (a *app) projector() worker.Projector {
	switch {
	case a.set.projector != nil:
		return a.set.projector
	case a.o.projectionFile != nil:
		return a.o.projectionFile
	default:
		return nil
	}
}

// prepareProjection prepares the projector against PostgreSQL when it is a
// worker.Preparer (the --projection file, or a projection.File given with
// runner.WithProjector), in every role with PostgreSQL (after dev's
// migrations and the program's setups): replay --rebuild and verify
// --repair run its statements too. A statement PostgreSQL refuses is a
// configuration error (exit 2) naming the file and the line.
func (a *app) prepareProjection(ctx context.Context) error {
	p, ok := a.projector().(worker.Preparer)
	if !ok || a.pg == nil {
		return nil
	}
	err := p.Prepare(ctx, a.pg)
	var se *projection.StatementError
	switch {
	case err == nil:
		return nil
	case !errors.As(err, &se):
		return err
	case a.set.projector == nil:
		return config.Invalid("projection", "%v", err)
	default:
		return config.Usagef("the projection file of runner.WithProjector: %w", err)
	}
}

// checkProjector refuses --projection beside runner.WithProjector: which of
// the two would project is not the operator's to guess.
func checkProjector(o *options, s *settings) error {
	if o.projection != "" && s.projector != nil {
		return config.Invalid("projection", "cannot be given to a program that sets its projector (runner.WithProjector)")
	}
	return nil
}

// checkedReadModel is a read model the operator actions and the audit can
// check: readmodel.DB or readmodel.Keyed.
type checkedReadModel interface {
	operator.ReadModel
	operator.AuditReadModel
}

// readModel returns the read model the operator actions and the audit
// check, from the workers' projector: the demo tables for the default, what
// a worker.Checker answers (a --projection file with its key line), or nil
// and why it cannot be checked (a projector that cannot tell; nil, "" when
// there is no PostgreSQL).
func (a *app) readModel() (checkedReadModel, string) {
	p := a.projector()
	if f, ok := p.(*projection.File); ok && f.Key == nil {
		return nil, fmt.Sprintf("the projection file %s has no `-- key: TABLE.COLUMN` line naming where it keeps the event id", f.Name)
	}
	c, isChecker := p.(worker.Checker)
	switch {
	case a.pg == nil:
		return nil, ""
	case p == nil:
		if !a.defaultReadModelPresent() {
			return nil, "outboxd's read model (tables events and device_daily_stats) is not in this PostgreSQL database (outboxd migrate --read-model-only applies it)"
		}
		return readmodel.New(a.pg), ""
	case isChecker:
		return readmodel.NewKeyed(a.pg, c), ""
	default:
		return nil, "its projector does not tell which originals it holds (it is no worker.Checker)"
	}
}

// readModelPresenceTimeout bounds the look for the default read model's
// tables.
const readModelPresenceTimeout = 5 * time.Second

// defaultReadModelPresent reports, looked up once, whether the default
// projector's tables are in the database: a team that projects into a read
// model of its own (with its own binary, while this one runs the stock
// reconciler) has not applied them. PostgreSQL not answering counts as
// present: the audit's runs say that it does not answer.
func (a *app) defaultReadModelPresent() bool {
	return presentOnce(&a.presentOnce, &a.present, readmodel.New(a.pg).Present)
}

// auditRecordable reports, looked up once, whether the table the audit
// records its runs in (audit_runs) is in the database: a team's own read
// model may have none of outboxd's migrations. PostgreSQL not answering
// counts as present.
func (a *app) auditRecordable() bool {
	return presentOnce(&a.auditOnce, &a.auditTable, readmodel.New(a.pg).AuditRecordable)
}

// presentOnce sets *present, once, to what look answers (true when it
// fails), and returns it.
func presentOnce(once *sync.Once, present *bool, look func(context.Context) (bool, error)) bool {
	once.Do(func() {
		ctx, cancel := context.WithTimeout(context.Background(), readModelPresenceTimeout)
		defer cancel()
		ok, err := look(ctx)
		*present = err != nil || ok
	})
	return *present
}

// auditOff says why the read model's audit cannot run ("": it can): the
// read model cannot be checked, or the audit's table is missing.
func (a *app) auditOff() (checkedReadModel, string) {
	rm, unchecked := a.readModel()
	switch {
	case unchecked != "":
		return nil, "this read model cannot be checked: " + unchecked
	case rm != nil && !a.auditRecordable():
		return nil, "it records its runs in the table audit_runs, which is not in this PostgreSQL database (outboxd migrate --read-model-only applies it)"
	}
	return rm, ""
}

// newWorker returns the process's workers: --concurrency batch loops,
// each a consumer of the group (--consumer, then --consumer-2, … when it
// is given), sharing the PostgreSQL pool, the metrics and one bound on the
// replay lane's rate.
func (a *app) newWorker() (service, error) {
	base := a.o.workerConfig()
	limiter := worker.NewReplayLimiter(base.ReplayRate)
	// One Worker per partition (each reads its partition's stream and
	// replay lane), --concurrency of them per partition, on each of the
	// projected streams.
	streams := a.projectedStreams()
	workers := make(serviceGroup, 0, a.o.concurrency*a.partitions()*len(streams))
	var hook worker.DeadLetterHook
	var hookService service
	if a.o.dlqWebhook != "" {
		h, err := dlqhook.New(dlqhook.Config{URL: a.o.dlqWebhook, Registerer: a.reg}, a.log)
		if err != nil {
			return nil, config.Invalid("dlq-webhook", "%v", err)
		}
		hook, hookService = h, h
	}
	for i := range a.o.concurrency {
		consumer := a.o.consumer
		if consumer != "" && i > 0 {
			consumer = fmt.Sprintf("%s-%d", consumer, i+1)
		}
		for p, s := range partitionsOf(streams, a.partitions()) {
			cfg := *base
			cfg.Stream, cfg.Consumer, cfg.Partition, cfg.Partitions = s, consumer, p, a.partitions()
			cfg.ReplayLimiter, cfg.Projector, cfg.Registerer, cfg.DeadLetterHook = limiter, a.projector(), a.reg, hook
			w, err := worker.New(a.st, a.rdb, a.pg, &cfg, a.log)
			if err != nil {
				return nil, err
			}
			workers = append(workers, w)
		}
	}
	if hookService != nil {
		return stopThen{first: workers.single(), then: hookService}, nil
	}
	return workers.single(), nil
}

// projectedStreams returns the streams whose workers project into the
// read model: dev runs them on each routed stream too, work reads
// --stream alone (and so do the other roles' checks of what it projects).
func (a *app) projectedStreams() []string {
	if a.role.name == "dev" {
		return a.streams()
	}
	return []string{a.o.stream}
}

// partitionsOf yields each partition of each of streams (n partitions
// each): the partition's index and its stream.
func partitionsOf(streams []string, n int) iter.Seq2[int, string] {
	return func(yield func(int, string) bool) {
		for _, s := range streams {
			for p := range n {
				if !yield(p, s) {
					return
				}
			}
		}
	}
}

// serviceGroup runs several services as one: Start starts each in turn
// (and stops those it started when one fails), Stop stops them all at
// once, so that each finishes its work in flight in parallel.
type serviceGroup []service

// stopThen runs two services, then started before first and stopped after
// it (the dead-letter hook hears of the workers' last dead letters).
type stopThen struct{ first, then service }

// Start starts then, then first.
func (s stopThen) Start(ctx context.Context) error {
	if err := s.then.Start(ctx); err != nil {
		return err
	}
	if err := s.first.Start(ctx); err != nil {
		_ = s.then.Stop(ctx)
		return err
	}
	return nil
}

// Stop stops first, then then.
func (s stopThen) Stop(ctx context.Context) error {
	return errors.Join(s.first.Stop(ctx), s.then.Stop(ctx))
}

// single returns g's one service when it has one, else g.
func (g serviceGroup) single() service {
	if len(g) == 1 {
		return g[0]
	}
	return g
}

// Start starts every service.
func (g serviceGroup) Start(ctx context.Context) error {
	for i, s := range g {
		if err := s.Start(ctx); err != nil {
			_ = g[:i].Stop(ctx)
			return err
		}
	}
	return nil
}

// Stop stops every service at once and returns their errors.
func (g serviceGroup) Stop(ctx context.Context) error {
	errs := make([]error, len(g))
	var wg sync.WaitGroup
	for i, s := range g {
		wg.Go(func() { errs[i] = s.Stop(ctx) })
	}
	wg.Wait()
	return errors.Join(errs...)
}

// newDispatcher returns the dispatcher of --stream, and with --route one
// more per routed stream, each with its own leases, checkpoints and trim
// (a service group). The originals' retention runs in --stream's only.
func (a *app) newDispatcher() (service, error) {
	var group serviceGroup
	for i, s := range a.streams() {
		cfg := a.o.dispatcherConfig()
		cfg.Stream, cfg.Partitions, cfg.Registerer = s, a.partitions(), a.reg
		if i > 0 {
			cfg.EventRetention, cfg.EventRetentionTypes, cfg.EventRetentionSources = 0, nil, nil
		}
		d, err := dispatcher.New(a.st, a.rdb, cfg, a.log)
		if err != nil {
			return nil, err
		}
		group = append(group, d)
	}
	return group.single(), nil
}

func (a *app) reconcilerConfig() *reconciler.Config {
	cfg := a.o.reconcilerConfig()
	cfg.Partitions, cfg.Registerer = a.partitions(), a.reg
	return cfg
}

// newAudit returns the read model's audit (--audit-every, --audit-sample),
// or nil when it is off.
func (a *app) newAudit() (service, error) {
	rm, off := a.auditOff()
	if off != "" && a.o.auditEvery != 0 {
		a.log.Warn("the read model's audit is off: " + off)
	}
	if a.o.auditEvery == 0 || rm == nil {
		return nil, nil
	}
	cfg := a.o.auditConfig()
	cfg.Store, cfg.ReadModel, cfg.Stream, cfg.Registerer = a.st, rm, a.o.stream, a.reg
	cfg.Routes, cfg.ProjectedStreams = a.o.routes.routes, a.projectedStreams()
	audit, err := operator.NewAudit(cfg, a.log)
	if err != nil {
		return nil, err
	}
	return audit, nil
}

func (a *app) newReconciler() (service, error) {
	r, err := reconciler.New(a.st, a.rdb, a.reconcilerConfig(), a.log)
	a.rec = r
	return r, err
}

// reconcileOnce runs one sweep for cron: the report goes to stdout (JSON
// with --json) and the log; any failed document makes the exit code 1. The
// sweep is recorded in the store for the status of every process, and with
// --metrics-file the process's metrics are written there at the end, in
// Prometheus' text format (for node_exporter's textfile collector): a
// process that lives for one sweep cannot be scraped.
func (a *app) reconcileOnce(ctx context.Context) error {
	r, err := reconciler.New(a.st, a.rdb, a.reconcilerConfig(), a.log)
	if err != nil {
		return err
	}
	rep, err := r.Sweep(ctx)
	if err == nil {
		if rerr := r.RecordSweep(ctx); rerr != nil {
			a.log.Warn("error recording the sweep for the status", zap.Error(rerr))
		}
	}
	if a.o.metricsFile != "" {
		if werr := prometheus.WriteToTextfile(a.o.metricsFile, a.reg); werr != nil {
			err = errors.Join(err, fmt.Errorf("error writing --metrics-file %s: %w", a.o.metricsFile, werr))
		}
	}
	if a.o.jsonOut {
		b, _ := json.Marshal(rep)
		fmt.Fprintln(a.stdout, string(b))
	} else {
		fmt.Fprintln(a.stdout, rep.String())
	}
	a.log.Info("sweep done", zap.Object("report", rep))
	if err != nil {
		return fmt.Errorf("sweep failed: %w", err)
	}
	if rep.Failed() {
		return errReported
	}
	return nil
}

// serve starts the services and the HTTP server, waits for ctx to end,
// then shuts down in this order, each step within --shutdown-timeout:
//  1. the HTTP server stops accepting connections, closes the idle ones and
//     answers the requests in flight (their events are written before it
//     returns); a body still arriving gets at most a second more, then its
//     client is answered 503, so a stalled client cannot hold this step up;
//     then the ingest committer stops (it writes what is still queued);
//  2. the services stop in the role's order, producers first: each stops
//     reading new work and finishes (acknowledges, checkpoints) its work in
//     flight;
//  3. the stores close (run's deferred close).
//
// The services are started on a context of their own, so that the signal
// reaches them only through this order.
func (a *app) serve(ctx context.Context, services []service) error {
	shutdownCtx := func() (context.Context, context.CancelFunc) {
		return context.WithTimeout(context.Background(), a.o.shutdownTimeout)
	}
	var started []service
	stopServices := func() error {
		sctx, cancel := shutdownCtx()
		defer cancel()
		var errs []error
		for _, s := range started {
			if err := s.Stop(sctx); err != nil {
				errs = append(errs, err)
			}
		}
		return errors.Join(errs...)
	}
	runCtx := context.WithoutCancel(ctx)
	for _, s := range services {
		if err := s.Start(runCtx); err != nil {
			_ = stopServices()
			return err
		}
		started = append(started, s)
	}
	srv, errc, err := a.listen(runCtx)
	if err != nil {
		_ = stopServices()
		return err
	}
	if a.history != nil {
		if err := a.history.Start(runCtx); err != nil {
			if a.committer != nil {
				_ = a.committer.Stop(runCtx)
			}
			_ = stopServices()
			return err
		}
	}
	var serveErr error
	select {
	case serveErr = <-errc:
	case <-ctx.Done():
	}
	a.log.Info("stopping")
	if srv != nil {
		sctx, cancel := shutdownCtx()
		if err := srv.Shutdown(sctx); err != nil {
			serveErr = errors.Join(serveErr, err)
		}
		if a.history != nil {
			_ = a.history.Stop(sctx) // it holds no work to finish
		}
		if a.committer != nil {
			// The server answered its requests: nothing is queued, but a
			// request it gave up on may still be.
			if err := a.committer.Stop(sctx); err != nil {
				serveErr = errors.Join(serveErr, fmt.Errorf("stopping the ingest committer: %w", err))
			}
		}
		cancel()
	}
	if err := stopServices(); err != nil {
		serveErr = errors.Join(serveErr, fmt.Errorf("stopping: %w", err))
	}
	a.log.Info("stopped")
	return serveErr
}

// listen starts the HTTP server of the role on --http-addr (none when it is
// empty), with the limits of the --http-* flags, and the ingest committer
// (on ctx) before it serves.
func (a *app) listen(ctx context.Context) (*httpapi.Server, <-chan error, error) {
	if a.o.httpAddr == "" {
		return nil, nil, nil
	}
	handler, err := a.httpHandler()
	if err != nil {
		return nil, nil, err
	}
	handler = instrument.HTTP(handler)
	scfg := a.o.serverConfig()
	scfg.Registerer = a.reg
	srv, err := httpapi.NewServer(handler, scfg, a.log)
	if err != nil {
		return nil, nil, err
	}
	ln, err := net.Listen("tcp", a.o.httpAddr)
	if err != nil {
		return nil, nil, fmt.Errorf("error listening on --http-addr %s: %w", a.o.httpAddr, err)
	}
	if a.committer != nil {
		if err := a.committer.Start(store.WithRole(ctx, store.RoleIngest)); err != nil {
			_ = ln.Close()
			return nil, nil, err
		}
	}
	errc := make(chan error, 1)
	go func() { errc <- srv.Serve(ln) }()
	a.log.Info("listening", zap.String("addr", ln.Addr().String()), zap.Bool("tls", a.o.tls != nil),
		zap.Int("max_conns", a.o.httpMaxConns), zap.Bool("auth", a.o.operator() != "" || a.o.viewerToken.value != "" || a.o.ingestToken.value != "" || len(a.o.clients.tokens) > 0))
	return srv, errc, nil
}

// httpHandler builds the role's HTTP surface: probes, metrics, status, the
// admin API and the console (/ui/) for every serving role, the ingest API
// for the api roles.
func (a *app) httpHandler() (http.Handler, error) {
	cfg := a.o.httpConfig()
	cfg.AuthToken, cfg.IngestToken, cfg.IngestClients, cfg.ViewerToken = a.o.operator(), a.o.ingestToken.value, a.o.clients.tokens, a.o.viewerToken.value
	cfg.LoopbackHosts = !a.o.allowNoAuth
	cfg.Profiles = a.o.pprof // the harness in cmd/outboxd-bench takes CPU profiles of a stage this way
	cfg.Metrics, cfg.Registerer, cfg.Ready = promhttp.HandlerFor(a.reg, promhttp.HandlerOpts{}), a.reg, a.readyChecks()
	if a.role.api {
		env := a.env()
		for _, rt := range a.set.routes {
			cfg.Routes = append(cfg.Routes, httpapi.Route{Pattern: rt.pattern, Handler: rt.handler(env)})
		}
	}
	if a.st != nil {
		status := &ostatus.Status{Store: a.st, Stream: a.o.stream, Group: a.o.group, Gatherer: a.reg,
			DispatcherLease: dispatcher.LeaseName(a.o.stream), ReconcilerLease: reconciler.LeaseName(a.o.stream), RoutedStreams: a.streams()[1:]}
		if n := a.partitions(); n > 1 {
			for p := range n {
				status.PartitionLeases = append(status.PartitionLeases, dispatcher.PartitionLeaseName(a.o.stream, store.Partition{Index: p, Count: n}))
			}
		}
		if a.rc != nil {
			status.Redis = a.rc
		}
		if a.rec != nil {
			status.LastSweep = a.rec.LastReport
		}
		if rm, _ := a.auditOff(); rm != nil {
			status.Audit = func(ctx context.Context) (*operator.AuditReport, error) {
				return operator.LastAudit(ctx, rm, a.o.stream)
			}
		}
		if _, unchecked := a.readModel(); unchecked != "" {
			status.Unchecked = unchecked
		}
		cfg.Status, cfg.Store = status, a.st
		if err := a.reg.Register(ostatus.NewCollector(status)); err != nil {
			return nil, err
		}
		admin, err := a.newAdmin()
		if err != nil {
			return nil, err
		}
		cfg.Admin = admin
		status.Pauses = admin.Pauses
		if a.history, err = ostatus.NewHistory(status, a.o.historyConfig(), a.log); err != nil {
			return nil, err
		}
		cfg.History, cfg.Console = a.history, true
	}
	if a.role.api {
		cfg.Writer = a.env().Writer
		committer, err := a.newCommitter(cfg.Writer)
		if err != nil {
			return nil, err
		}
		a.committer, cfg.Committer = committer, committer
	}
	return httpapi.New(cfg, a.log)
}

// env returns what the role opened, for the program's own parts.
func (a *app) env() *Env {
	if a.role.api && a.writer == nil && a.st != nil {
		a.writer = outbox.NewWriter(a.st, &outbox.WriterConfig{Stream: a.o.stream, Partitions: a.partitions(), Message: &a.o.message, Routes: a.o.routes.routes})
	}
	return &Env{Role: a.role.name, Store: a.opened, Writer: a.writer, Postgres: a.pg,
		Stream: a.o.stream, Partitions: a.partitions(), Logger: a.log}
}

// newCommitter returns the group commit of POST /v1/events
// (--ingest-group-wait, --ingest-group-max, --ingest-group-max-bytes), with the histogram
// outboxd_ingest_group_events.
func (a *app) newCommitter(w *outbox.Writer) (*outbox.Committer, error) {
	f := ometrics.NewFactory(a.reg, "ingest", a.o.stream)
	sizes := f.Histogram("group_events", "Events per shared store transaction of POST /v1/events (group commit).",
		prometheus.ExponentialBuckets(1, 2, 10))
	if err := f.Err(); err != nil {
		return nil, err
	}
	cfg := a.o.committerConfig()
	cfg.ObserveGroup = func(events int) { sizes.Observe(float64(events)) }
	return outbox.NewCommitter(w, cfg)
}

// newAdmin returns the operator actions over the backends this role has
// (the admin API answers 501 for an action that needs one it lacks).
func (a *app) newAdmin() (*operator.Operator, error) {
	if a.admin != nil { // one per process: its metrics are registered once
		return a.admin, nil
	}
	cfg := &operator.Config{Store: a.st, Stream: a.o.stream, Group: a.o.group, Partitions: a.partitions(), Routes: a.o.routes.routes,
		ProjectedStreams: a.projectedStreams(), Role: a.role.name, EventRetention: a.o.eventRetention, Registerer: a.reg, Message: &a.o.message}
	if a.rc != nil {
		cfg.Redis = a.rc
	}
	if rm, unchecked := a.readModel(); rm != nil {
		cfg.ReadModel = rm
	} else {
		cfg.Unchecked = unchecked
	}
	admin, err := operator.New(cfg, a.log)
	a.admin = admin
	return admin, err
}

// readyChecks are the dependencies of the role. Redis is not on the
// ingest path, so the ingest role does not check it.
func (a *app) readyChecks() []httpapi.Check {
	var checks []httpapi.Check
	if a.st != nil {
		checks = append(checks, httpapi.Check{Name: "store", Func: a.st.Ping})
	}
	if a.rc != nil {
		// Reachable and with room for writes: a dispatcher or a worker
		// cannot do its job while Redis refuses writes.
		checks = append(checks, httpapi.Check{Name: "redis", Func: a.rc.Writable})
	}
	if a.pg != nil && !a.role.postgresAside {
		checks = append(checks, httpapi.Check{Name: "postgres", Func: a.pg.Ping})
	}
	return checks
}

// evictionCheckTimeout bounds the start's look at Redis's memory policy.
const evictionCheckTimeout = 2 * time.Second

// checkEviction logs an error when Redis's maxmemory-policy lets it evict
// keys (anything but noeviction): outboxd's stream, consumer group and dead
// letters must not be evicted (docs/operations.md, "Redis memory"). The
// status shows it too. A Redis that cannot be read now is the role's own
// start to report.
func (a *app) checkEviction(ctx context.Context) {
	ctx, cancel := context.WithTimeout(ctx, evictionCheckTimeout)
	defer cancel()
	m, err := a.rc.Memory(ctx)
	if err != nil {
		return
	}
	if m.Evicts() {
		a.log.Error("redis's maxmemory-policy lets it evict outboxd's keys (the stream, its consumer group, the dead letters); set maxmemory-policy noeviction",
			zap.String("maxmemory_policy", m.Policy), zap.Int64("maxmemory", m.Max))
	}
}

// partitions is --partitions (1 for a role without the flag).
func (a *app) partitions() int { return max(a.o.partitions, 1) }

// checkPartitions makes sure that the store records --partitions for the
// stream and each routed one (store.EnsurePartitions: the first role to start on a store
// records it), for every role with the flag and a store; another number is
// a configuration error (exit 2) that names the procedure.
func (a *app) checkPartitions(ctx context.Context) error {
	if a.st == nil || a.o.partitions == 0 {
		return nil
	}
	for _, s := range a.streams() { // each routed stream has as many
		err := store.EnsurePartitions(ctx, a.st, s, a.o.partitions)
		var mismatch *store.PartitionsMismatchError
		if errors.As(err, &mismatch) {
			return config.Invalid("partitions", "%d: %v", a.o.partitions, err)
		}
		if err != nil {
			return err
		}
	}
	return nil
}

// switchPartitions is `outboxd partitions switch --to N`: the switch step
// of changing the number of partitions (store.SwitchPartitions); it exits
// 1 while the pipeline is not drained.
func (a *app) switchPartitions(ctx context.Context) error {
	// --to is also the window's end of replay and verify: checked here.
	if outbox.ValidatePartitions(a.o.partitionsTo) != nil {
		return config.Invalid("to", "is required: the new number of partitions, 1 to %d", outbox.PartitionsMax)
	}
	was, err := store.SwitchPartitions(ctx, a.st, a.o.stream, a.o.partitionsTo)
	if err != nil {
		return err
	}
	_, err = fmt.Fprintf(a.stdout, "stream %s: %d partitions recorded (was %d); start every role with --partitions %d\n",
		a.o.stream, a.o.partitionsTo, was, a.o.partitionsTo)
	return err
}
