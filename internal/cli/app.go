package cli

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"time"

	"github.com/256dpi/lungo"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/redis/go-redis/v9"
	"go.mongodb.org/mongo-driver/mongo/readpref"
	"go.uber.org/zap"

	"github.com/outboxd/outboxd/internal/mongodb"
	"github.com/outboxd/outboxd/internal/status"
	"github.com/outboxd/outboxd/migrations"
	"github.com/outboxd/outboxd/outbox"
)

// app holds the stores a role opened; run closes them.
type app struct {
	o      *options
	log    *zap.Logger
	stdout io.Writer

	mongo *mongodb.Conn
	db    lungo.IDatabase
	rdb   *redis.Client
	pg    *pgxpool.Pool
	reg   *prometheus.Registry
}

// service is a long-running component (dispatcher, worker, reconciler loop).
type service interface {
	Start(ctx context.Context) error
	Stop(ctx context.Context)
}

func (a *app) run(ctx context.Context) error {
	if a.o.role == "status" {
		return a.status(ctx)
	}
	a.log.Info("starting", zap.String("config", a.o.String()))
	defer a.close()
	switch a.o.role {
	case "migrate":
		if err := a.openMongo(ctx); err != nil {
			return err
		}
		return a.migrate(ctx)
	}
	if err := a.openMongo(ctx); err != nil {
		return err
	}
	a.reg = prometheus.NewRegistry()
	a.reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	if a.o.registered["redis-url"] {
		opt, err := redis.ParseURL(a.o.redisURL)
		if err != nil {
			return fmt.Errorf("error reading --redis-url: %w", err)
		}
		a.rdb = redis.NewClient(opt)
	}
	if a.o.registered["postgres-url"] {
		pool, err := pgxpool.New(ctx, a.o.postgresURL)
		if err != nil {
			return fmt.Errorf("error opening PostgreSQL at %s: %w", mongodb.Redact(a.o.postgresURL), err)
		}
		a.pg = pool
	}
	switch a.o.role {
	case "dev":
		if err := a.migrate(ctx); err != nil {
			return err
		}
	case "dispatch":
		// The dispatcher owns --outbox-retention: keep the TTL index in step.
		if err := migrations.Mongo(ctx, a.db, &migrations.MongoConfig{OutboxRetention: a.o.outboxRetention}); err != nil {
			return err
		}
	}
	if a.o.role == "reconcile" && a.o.every == 0 {
		return a.reconcileOnce(ctx)
	}
	services, err := a.services()
	if err != nil {
		return err
	}
	return a.serve(ctx, services)
}

func (a *app) openMongo(ctx context.Context) error {
	conn, err := mongodb.Open(ctx, a.o.mongoURI, nil)
	if err != nil {
		return err
	}
	a.mongo, a.db = conn, conn.Client.Database(a.o.mongoDB)
	return nil
}

func (a *app) close() {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if a.pg != nil {
		a.pg.Close()
	}
	if a.rdb != nil {
		_ = a.rdb.Close()
	}
	if a.mongo != nil {
		_ = a.mongo.Close(ctx)
	}
}

func (a *app) migrate(ctx context.Context) error {
	n, err := migrations.Postgres(ctx, a.o.postgresURL)
	if err != nil {
		return err
	}
	if err := migrations.Mongo(ctx, a.db, &migrations.MongoConfig{OutboxRetention: a.o.outboxRetention}); err != nil {
		return err
	}
	a.log.Info("migrations applied", zap.Int("postgres_applied", n))
	return nil
}

// serve starts the services and the HTTP server, waits for ctx to end, then
// stops them: the HTTP server first (no new events), then the services in
// reverse order, each finishing its work in flight within the grace period.
func (a *app) serve(ctx context.Context, services []service) error {
	var started []service
	stopAll := func() {
		stopCtx, cancel := context.WithTimeout(context.Background(), a.o.shutdownTimeout)
		defer cancel()
		for i := len(started) - 1; i >= 0; i-- {
			started[i].Stop(stopCtx)
		}
	}
	for _, s := range services {
		if err := s.Start(ctx); err != nil {
			stopAll()
			return err
		}
		started = append(started, s)
	}
	err := a.serveHTTP(ctx)
	stopAll()
	a.log.Info("stopped")
	return err
}

func (a *app) statusSource() *status.Source {
	var rdb redis.UniversalClient
	if a.rdb != nil {
		rdb = a.rdb
	}
	return &status.Source{DB: a.db, Redis: rdb, Stream: a.o.stream, Group: a.o.group}
}

// ready checks the dependencies this role uses.
func (a *app) ready(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	if err := a.mongo.Client.Ping(ctx, readpref.Primary()); err != nil {
		return fmt.Errorf("MongoDB: %w", err)
	}
	if a.o.role != "ingest" && a.rdb != nil { // Redis is not on the ingest path
		if err := a.rdb.Ping(ctx).Err(); err != nil {
			return fmt.Errorf("redis: %w", err)
		}
	}
	if a.pg != nil {
		if err := a.pg.Ping(ctx); err != nil {
			return fmt.Errorf("PostgreSQL: %w", err)
		}
	}
	return nil
}

func (a *app) serveHTTP(ctx context.Context) error {
	if a.o.httpAddr == "" {
		<-ctx.Done()
		return nil
	}
	src := a.statusSource()
	a.reg.MustRegister(status.NewCollector(src))
	var handler http.Handler
	cfg := &outbox.HandlerConfig{
		AuthToken:  a.o.authToken,
		MaxBody:    a.o.maxBody,
		MaxBatch:   a.o.maxBatch,
		Status:     func(ctx context.Context) (any, error) { return src.Snapshot(ctx) },
		Ready:      a.ready,
		Metrics:    promhttp.HandlerFor(a.reg, promhttp.HandlerOpts{}),
		Registerer: a.reg,
	}
	if a.o.role == "dev" || a.o.role == "ingest" {
		w := outbox.NewWriter(a.db, &outbox.WriterConfig{Stream: a.o.stream})
		h, err := outbox.NewHandler(a.db, w, cfg, a.log.Named("ingest"))
		if err != nil {
			return err
		}
		handler = h
	} else {
		handler = opsHandler(cfg)
	}
	ln, err := net.Listen("tcp", a.o.httpAddr)
	if err != nil {
		return fmt.Errorf("error listening on --http-addr %s: %w", a.o.httpAddr, err)
	}
	srv := &http.Server{Handler: handler, ReadHeaderTimeout: 10 * time.Second}
	errc := make(chan error, 1)
	go func() { errc <- srv.Serve(ln) }()
	a.log.Info("listening", zap.String("addr", ln.Addr().String()))
	select {
	case err := <-errc:
		return fmt.Errorf("HTTP server: %w", err)
	case <-ctx.Done():
	}
	shutCtx, cancel := context.WithTimeout(context.Background(), a.o.shutdownTimeout)
	defer cancel()
	if err := srv.Shutdown(shutCtx); err != nil && !errors.Is(err, http.ErrServerClosed) {
		return fmt.Errorf("HTTP shutdown: %w", err)
	}
	return nil
}

// opsHandler serves /healthz, /readyz and /metrics for roles without the API.
func opsHandler(cfg *outbox.HandlerConfig) http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		_, _ = io.WriteString(w, `{"status":"ok"}`)
	})
	mux.HandleFunc("GET /readyz", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		if err := cfg.Ready(r.Context()); err != nil {
			w.WriteHeader(http.StatusServiceUnavailable)
			_ = json.NewEncoder(w).Encode(map[string]string{"status": "unavailable", "detail": err.Error()})
			return
		}
		_, _ = io.WriteString(w, `{"status":"ok"}`)
	})
	mux.Handle("GET /metrics", cfg.Metrics)
	return mux
}

// status prints GET /v1/status of the instance at --http-addr.
func (a *app) status(ctx context.Context) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+a.o.httpAddr+"/v1/status", nil)
	if err != nil {
		return err
	}
	if a.o.authToken != "" {
		req.Header.Set("Authorization", "Bearer "+a.o.authToken)
	}
	resp, err := (&http.Client{Timeout: 10 * time.Second}).Do(req)
	if err != nil {
		return fmt.Errorf("error reaching outboxd at %s (is it running?): %w", a.o.httpAddr, err)
	}
	defer resp.Body.Close()
	if _, err := io.Copy(a.stdout, resp.Body); err != nil {
		return err
	}
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("GET /v1/status answered %s", resp.Status)
	}
	return nil
}
