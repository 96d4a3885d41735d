// Package runner is the outboxd binary as a library: Run parses a command
// line (a role and its flags, exactly as `outboxd` takes them) and runs that
// role until its context ends. cmd/outboxd's main is Run with no options; a
// team's own binary is the same few lines plus options: its projector, a
// store over the clients it already has, its own HTTP routes (its ingest
// handler), its Prometheus registry and logger. Every role, flag,
// OUTBOXD_* variable, probe, metric, admin route, the console, partitions,
// tracing and the shutdown order stay those of the stock binary.
//
//	func main() {
//		ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
//		code := runner.Run(ctx, os.Args[1:], os.Stdout, os.Stderr,
//			runner.WithProjector(myProjector{}),
//			runner.WithSetup(createMyTables),
//			runner.WithRoute("POST /orders", func(env *runner.Env) http.Handler {
//				return &ordersHandler{store: env.Store, writer: env.Writer}
//			}))
//		stop()
//		os.Exit(code)
//	}
//
// docs/adopting.md walks through a whole service; examples/orders is one
// that `make test` runs.
package runner

import (
	"context"
	"io"
	"net/http"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap"

	"github.com/outboxd/outboxd/outbox"
	"github.com/outboxd/outboxd/store"
	"github.com/outboxd/outboxd/worker"
)

// Option changes what Run runs beside the stock binary's behaviour.
type Option func(*settings)

// settings are what the options set; the zero value is the stock binary.
type settings struct {
	projector worker.Projector
	store     store.Store
	routes    []route
	setups    []func(ctx context.Context, env *Env) error
	registry  *prometheus.Registry
	logger    *zap.Logger
}

// route is an HTTP route of the caller's own (WithRoute).
type route struct {
	pattern string
	handler func(env *Env) http.Handler
}

// Env is what Run opened for the role, handed to the program's own parts
// (WithSetup, WithRoute), so that they use the role's configuration rather
// than reading the flags a second time.
type Env struct {
	// Role is the subcommand: "ingest", "work", "dev", "migrate", …
	Role string
	// Store is the role's store (WithStore's, or the one --store names;
	// not wrapped for tracing, so a type assertion to *sqlitestore.Store or
	// *mongostore.Store reaches its RunTx). Nil for a role without one.
	Store store.Store
	// Writer writes events with the role's --stream and --partitions; set
	// for the roles that serve ingest (ingest, dev).
	Writer *outbox.Writer
	// Postgres is the role's pool, nil for a role that does not open
	// PostgreSQL.
	Postgres *pgxpool.Pool
	// Stream is --stream and Partitions --partitions.
	Stream     string
	Partitions int
	// Logger is the role's logger.
	Logger *zap.Logger
}

// WithProjector makes the workers (`work` and `dev`) write batches into the
// read model with p instead of the default projector (the events table and
// the daily statistics).
func WithProjector(p worker.Projector) Option {
	return func(s *settings) { s.projector = p }
}

// WithStore makes every role use st, a store the caller opened (for
// example mongostore over the *mongo.Client its service already has),
// instead of opening the one --store names. Run neither migrates nor
// closes it beyond what the role does (`migrate` and `dev` migrate it); the
// caller closes it after Run returns.
func WithStore(st store.Store) Option {
	return func(s *settings) { s.store = st }
}

// WithRoute serves the handler that handler returns (given the role's Env,
// once, when the server starts) at pattern, a net/http.ServeMux pattern
// ("POST /orders") that must not overlap one of outboxd's routes. It is
// served on --http-addr by the roles that serve ingest (`ingest` and
// `dev`), behind the same admission and the same scope as POST /v1/events:
// with tokens configured, the caller must bear the ingest token (or the
// operator's). Requests are counted in outboxd_http_requests_total under
// the pattern.
func WithRoute(pattern string, handler func(env *Env) http.Handler) Option {
	return func(s *settings) { s.routes = append(s.routes, route{pattern: pattern, handler: handler}) }
}

// WithSetup runs fn once the role has opened its backends (and applied the
// schemas, for `migrate` and `dev`), before it starts anything: the place
// for a program's own schema (its tables in the store and in PostgreSQL,
// created idempotently). It runs for every role that opens a backend; an
// error ends the role with exit code 1.
func WithSetup(fn func(ctx context.Context, env *Env) error) Option {
	return func(s *settings) { s.setups = append(s.setups, fn) }
}

// WithRegistry makes Run register its metrics in reg and serve reg on
// /metrics, so that the caller's own metrics are served beside outboxd's.
// The Go and process collectors are added unless reg has them already.
func WithRegistry(reg *prometheus.Registry) Option {
	return func(s *settings) { s.registry = reg }
}

// WithLogger makes Run log through logger instead of building one from
// --log-level. Run does not sync it.
func WithLogger(logger *zap.Logger) Option {
	return func(s *settings) { s.logger = logger }
}

// Run runs the command line args (without the program name: a role and its
// flags, as `outboxd` takes them) until ctx is cancelled or the role ends,
// and returns the process exit code: 0 ok, 1 a runtime failure or drift
// found, 2 a usage or configuration error. Usage and errors go to stderr,
// reports and tables to stdout.
func Run(ctx context.Context, args []string, stdout, stderr io.Writer, opts ...Option) int {
	var s settings
	for _, o := range opts {
		o(&s)
	}
	return runWith(ctx, args, stdout, stderr, &s)
}
