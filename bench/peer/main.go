package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"net/http"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/redis/go-redis/v9"
)

// Config is the peer's configuration, from its flags.
type Config struct {
	Role        string
	HTTPAddr    string
	PostgresURL string
	RedisURL    string
	// Stream is the Redis stream (the Watermill topic the forwarder
	// publishes to and the consumer reads).
	Stream   string
	Group    string
	Consumer string
	// ForwardTopic is the outbox's topic in PostgreSQL (watermill-sql's
	// table watermill_<ForwardTopic>).
	ForwardTopic string
	// PollInterval is the outbox subscriber's wait when it found nothing.
	PollInterval time.Duration
}

// Defaults of the flags.
const (
	HTTPAddrDefault     = "127.0.0.1:8090"
	PostgresURLDefault  = "postgres://outboxd:outboxd@127.0.0.1:5432/outboxd?sslmode=disable"
	RedisURLDefault     = "redis://127.0.0.1:6379/0"
	StreamDefault       = "outboxd-peer"
	GroupDefault        = "peer"
	ConsumerDefault     = "c0"
	ForwardTopicDefault = "outboxd_peer_outbox"
	PollIntervalDefault = 10 * time.Millisecond
)

// roles the peer runs.
var roles = map[string]struct{ ingest, forward, work bool }{
	"ingest":  {ingest: true},
	"forward": {forward: true},
	"work":    {work: true},
	"dev":     {ingest: true, forward: true, work: true},
}

func (c *Config) validate() error {
	if _, ok := roles[c.Role]; !ok {
		return fmt.Errorf("role must be one of ingest, forward, work, dev (got %q)", c.Role)
	}
	if c.PollInterval <= 0 {
		return fmt.Errorf("--poll-interval must be positive (got %s)", c.PollInterval)
	}
	return nil
}

func parse(args []string) (*Config, error) {
	c := &Config{}
	if len(args) > 0 {
		c.Role, args = args[0], args[1:]
	}
	fs := flag.NewFlagSet("outboxd-peer", flag.ContinueOnError)
	fs.StringVar(&c.HTTPAddr, "http-addr", HTTPAddrDefault, "address of the HTTP API")
	fs.StringVar(&c.PostgresURL, "postgres-url", PostgresURLDefault, "PostgreSQL: the originals, the outbox and the read model")
	fs.StringVar(&c.RedisURL, "redis-url", RedisURLDefault, "Redis")
	fs.StringVar(&c.Stream, "stream", StreamDefault, "the Redis stream")
	fs.StringVar(&c.Group, "group", GroupDefault, "the consumer group")
	fs.StringVar(&c.Consumer, "consumer", ConsumerDefault, "the consumer's name in the group")
	fs.StringVar(&c.ForwardTopic, "forward-topic", ForwardTopicDefault, "the outbox's topic in PostgreSQL")
	fs.DurationVar(&c.PollInterval, "poll-interval", PollIntervalDefault, "the outbox subscriber's wait when it found nothing")
	fs.String("log-level", "warn", "accepted for the harness; the peer logs errors only")
	if err := fs.Parse(args); err != nil {
		return nil, err
	}
	return c, c.validate()
}

func main() {
	cfg, err := parse(os.Args[1:])
	if err != nil {
		fmt.Fprintln(os.Stderr, "outboxd-peer:", err)
		os.Exit(2)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, cfg); err != nil {
		fmt.Fprintln(os.Stderr, "outboxd-peer:", err)
		os.Exit(1)
	}
}

// run serves the role until ctx ends.
func run(ctx context.Context, cfg *Config) error {
	logger := watermill.NewStdLogger(false, false)
	pool, err := pgxpool.New(ctx, cfg.PostgresURL)
	if err != nil {
		return fmt.Errorf("error connecting to PostgreSQL: %w", err)
	}
	defer pool.Close()
	opt, err := redis.ParseURL(cfg.RedisURL)
	if err != nil {
		return fmt.Errorf("error parsing the Redis URL: %w", err)
	}
	rdb := redis.NewClient(opt)
	defer rdb.Close()
	if err := migrate(ctx, pool, cfg.ForwardTopic, logger); err != nil {
		return err
	}
	role := roles[cfg.Role]
	mux := http.NewServeMux()
	mux.HandleFunc("GET /readyz", func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(http.StatusOK) })
	if role.ingest {
		in := &ingester{pool: pool, stream: cfg.Stream, forwardTopic: cfg.ForwardTopic, logger: logger}
		mux.HandleFunc("POST /v1/events", in.single)
		mux.HandleFunc("POST /v1/events:batch", in.batch)
	}
	errs := make(chan error, 3)
	if role.forward {
		fw, err := newForwarder(pool, rdb, cfg, logger)
		if err != nil {
			return err
		}
		go func() { errs <- fw.Run(ctx) }()
		defer fw.Close()
	}
	if role.work {
		r, err := newConsumer(pool, rdb, cfg, logger)
		if err != nil {
			return err
		}
		go func() { errs <- r.Run(ctx) }()
		defer r.Close()
	}
	srv := &http.Server{Addr: cfg.HTTPAddr, Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	go func() { errs <- srv.ListenAndServe() }()
	select {
	case <-ctx.Done():
	case err := <-errs:
		if err != nil && !errors.Is(err, http.ErrServerClosed) {
			return err
		}
	}
	sctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	return srv.Shutdown(sctx)
}
