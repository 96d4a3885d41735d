package httpapi

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"math"
	"net/http"
	"runtime"
	"strconv"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap"

	"github.com/outboxd/outboxd/internal/bounds"
	"github.com/outboxd/outboxd/internal/httpapi/console"
	ometrics "github.com/outboxd/outboxd/internal/metrics"
	"github.com/outboxd/outboxd/internal/operator"
	"github.com/outboxd/outboxd/outbox"
	"github.com/outboxd/outboxd/store"
)

// Defaults of Config.
const (
	// MaxBodyDefault is the largest accepted request body (--max-body).
	MaxBodyDefault int64 = 1 << 20
	// MaxBodyMax is the largest MaxBody that may be set: 1.5 MiB. A JSON
	// payload becomes at most eight times its bytes as BSON in the MongoDB
	// store (an array of one-digit integers; mongostore's
	// TestMaxBodyKeepsDocumentsUnder16MiB), so no accepted body can make a
	// document past MongoDB's 16 MiB limit: 12 MiB at most, with room for
	// the event's other fields.
	MaxBodyMax int64 = 3 << 19
	// MaxBatchDefault is the most events one batch may hold (--max-batch).
	MaxBatchDefault = 500
	// RetryAfterDefault is what a 503 tells clients to wait.
	RetryAfterDefault = 5 * time.Second
	// RequestTimeoutDefault is the default Config.RequestTimeout.
	RequestTimeoutDefault = 10 * time.Second
)

// MaxValuesDefault is the default Config.MaxValues.
const MaxValuesDefault = 1_000_000

// MaxDecodesDefault is the default Config.MaxDecodes: one decode per core
// (decoding only uses the CPU, so more at once would only hold more
// memory).
var MaxDecodesDefault = runtime.GOMAXPROCS(0)

// IdempotencyKeyHeader carries the idempotency key of POST /v1/events.
const IdempotencyKeyHeader = "Idempotency-Key"

// JSONSource is what a read-only route serves: a document read at each
// request and encoded as JSON (package status: Status for GET /v1/status,
// History for GET /v1/status/history). It keeps this package apart from
// what the status reads.
type JSONSource interface {
	JSON(ctx context.Context) any
}

func (h *handler) status(w http.ResponseWriter, r *http.Request) {
	writeJSON(w, r, http.StatusOK, h.cfg.Status.JSON(r.Context()))
}

func (h *handler) history(w http.ResponseWriter, r *http.Request) {
	writeJSON(w, r, http.StatusOK, h.cfg.History.JSON(r.Context()))
}

// Config configures the HTTP surface. A nil config serves only /healthz.
type Config struct {
	// AuthToken is the operator token (ScopeOperator: every route, the
	// admin actions included; --operator-token, or --auth-token). Defaults
	// to "" (none).
	AuthToken string
	// IngestToken is the ingest token (ScopeIngest: POST /v1/events,
	// POST /v1/events:batch). Defaults to "" (none).
	IngestToken string
	// IngestClients are named ingest clients, token by name (ScopeIngest
	// each; --ingest-client). The events of each are recorded with its
	// name and their idempotency keys, given or derived, are its own
	// (outbox.ClientKey), so that no client can take, or make a 422 of,
	// another's key. IngestToken is the client named outbox.ClientDefault,
	// whose keys stay bare, and so is the operator token when it posts.
	// Names are outbox.ClientNameProblem's, ClientDefault excepted.
	// Defaults to none.
	IngestClients map[string]string
	// ViewerToken is the viewer token (ScopeViewer: every read, and the
	// admin requests that change nothing). Defaults to "" (none).
	//
	// Once any token is set, every request under /v1/ (and the profiles)
	// needs a known one (else 401), and a known token on a route outside
	// its scope gets 403 (ProblemScope); a scope without a token of its own
	// is open to the operator token only. /healthz, /readyz, /metrics and
	// the console's pages need none. Each token is compared in constant
	// time; no two scopes may share one.
	ViewerToken string
	// LoopbackHosts, when no token is set, answers only the requests whose
	// Host header names a loopback address (localhost, 127.0.0.0/8, ::1);
	// others get 403 (ProblemHost), the probes and /metrics excepted. So a
	// page of another origin whose name resolves to 127.0.0.1 (DNS
	// rebinding) cannot use an API without a token. It has no effect once a
	// token is set. Defaults to false; outboxd sets it unless
	// --allow-no-auth.
	LoopbackHosts bool
	// Profiles serves Go's profiles (net/http/pprof) under /debug/pprof/
	// to the operator token (to anyone when no token is set), never the
	// command line (/debug/pprof/cmdline, which would show its secrets).
	// Defaults to false.
	Profiles bool
	// MaxBody bounds a request body in bytes; larger bodies get 413.
	// Defaults to MaxBodyDefault (1 MiB); at most MaxBodyMax.
	MaxBody int64
	// MaxBatch bounds the events of one POST /v1/events:batch. Defaults to
	// MaxBatchDefault (500).
	MaxBatch int
	// MaxDecodes bounds the ingest bodies decoded and validated at once
	// (the canonical payload each builds is about its body's size; the
	// others wait their turn). Defaults to MaxDecodesDefault (GOMAXPROCS).
	MaxDecodes int
	// MaxValues bounds the JSON values of one ingest body (every object,
	// array, string, number and literal, the payloads' included); a body
	// with more is answered 413 before anything is built of it. Defaults
	// to MaxValuesDefault (1,000,000).
	MaxValues int
	// RetryAfter is sent, rounded up to whole seconds, in the Retry-After
	// header of a 503. It is also how long GET /readyz says "store:
	// refusing writes" after the store refused an ingest write, unless a
	// write succeeds earlier. Defaults to RetryAfterDefault (5 seconds).
	RetryAfter time.Duration
	// RequestTimeout bounds the store work of one ingest request; a request
	// that runs out of it gets 503 with Retry-After. Defaults to
	// RequestTimeoutDefault (10s).
	RequestTimeout time.Duration

	// Writer, when set, serves POST /v1/events and POST /v1/events:batch.
	Writer *outbox.Writer
	// Committer, when set, writes the events of POST /v1/events and POST
	// /v1/events:batch together with those of concurrent requests in one
	// store transaction (group commit, see outbox.Committer); it must write
	// through Writer. Each request stays all or nothing for itself; a batch
	// of more events than the committer's GroupMax goes alone. Defaults to
	// nil: every request its own transaction.
	Committer *outbox.Committer
	// Store, when set, serves GET /v1/events/{id}.
	Store store.Store
	// Status, when set, serves GET /v1/status (a status.Status).
	Status JSONSource
	// Admin, when set, serves the operator actions under /v1/admin/
	// (package operator, docs/operations.md): the routes parse requests
	// into its queries and answer its errors as problems.
	Admin *operator.Operator
	// ReadOnly makes the admin API refuse, with 403 (ProblemReadOnly), the
	// actions that change something: DLQ replay and drop, a replay other
	// than a dry run, verify with repair; and the console shows no action.
	// Listings, dry runs and verify without repair still answer. Defaults
	// to false.
	ReadOnly bool
	// History, when set, serves GET /v1/status/history: the figures of
	// the last minutes, sampled in this process (a status.History).
	History JSONSource
	// Console serves the operator console at /ui/ (package
	// httpapi/console): pages that read this API with the bearer token.
	// Defaults to false.
	Console bool
	// Ready are the checks of GET /readyz, by name; each gets the request's
	// context bounded to 2 seconds. None: always ready. With Writer set,
	// /readyz also checks ingest's writes under the name "store" (the
	// store refused the last one: "refusing writes").
	Ready []Check
	// Metrics, when set, serves GET /metrics.
	Metrics http.Handler
	// Routes are a program's own routes (runner.WithRoute), served behind
	// the ingest scope.
	Routes []Route
	// Registerer, when set, receives outboxd_http_requests_total{route,code}
	// and outboxd_http_request_duration_seconds{route}; collectors already
	// registered by another handler are shared.
	Registerer prometheus.Registerer
}

// Route is a route of the program's own: a ServeMux pattern and its
// handler, guarded like POST /v1/events (the ingest scope).
type Route struct {
	Pattern string
	Handler http.Handler
}

// Check is one readiness check: the name is shown in /readyz, the error
// only logged.
type Check struct {
	Name string
	Func func(ctx context.Context) error
}

func (c *Config) withDefaults() Config {
	out := Config{}
	if c != nil {
		out = *c
	}
	out.MaxBody = cmp.Or(out.MaxBody, MaxBodyDefault)
	out.MaxBatch = cmp.Or(out.MaxBatch, MaxBatchDefault)
	out.RetryAfter = cmp.Or(out.RetryAfter, RetryAfterDefault)
	out.RequestTimeout = cmp.Or(out.RequestTimeout, RequestTimeoutDefault)
	out.MaxDecodes = cmp.Or(out.MaxDecodes, MaxDecodesDefault)
	out.MaxValues = cmp.Or(out.MaxValues, MaxValuesDefault)
	return out
}

// Validate checks c as New takes it: a zero field takes its default, any
// other value must be within its field's bound; each error names its
// field, and they are joined. A nil config is valid.
func (c *Config) Validate() error {
	d := c.withDefaults()
	return d.validate()
}

// validate checks a defaulted config; each error names the field.
func (c *Config) validate() error {
	var errs []error
	if c.MaxBody < 1 || c.MaxBody > MaxBodyMax {
		errs = append(errs, bounds.Errorf("MaxBody", c.MaxBody, "must be between 1 and %d (a larger body could become a MongoDB document over its 16 MiB limit)", MaxBodyMax))
	}
	for _, f := range []struct {
		name string
		v    int
	}{{"MaxDecodes", c.MaxDecodes}, {"MaxValues", c.MaxValues}, {"MaxBatch", c.MaxBatch}} {
		if f.v < 1 {
			errs = append(errs, bounds.Errorf(f.name, f.v, "must be positive"))
		}
	}
	if c.RetryAfter < 0 {
		errs = append(errs, bounds.Errorf("RetryAfter", c.RetryAfter, "must not be negative"))
	}
	if c.RequestTimeout < time.Millisecond {
		errs = append(errs, bounds.Errorf("RequestTimeout", c.RequestTimeout, "must be at least 1ms"))
	}
	errs = append(errs, c.validateTokens())
	return errors.Join(errs...)
}

// handler serves the HTTP API.
type handler struct {
	cfg        Config
	writer     *outbox.Writer
	tokens     []tokenOf
	retryAfter string
	logger     *zap.Logger
	mux        *http.ServeMux
	requests   *prometheus.CounterVec
	duration   *prometheus.HistogramVec
	inFlight   *prometheus.GaugeVec
	ingest     *ingestMetrics
	writes     *writeHealth // set where the handler serves ingest
	console    http.Handler
	// own are the patterns of the program's own routes (Config.Routes),
	// which admit checks tokens for wherever they are.
	own map[string]bool
	// decodes holds a place per body being decoded (Config.MaxDecodes).
	decodes chan struct{}
}

// New returns the HTTP surface of outboxd (README.md, "HTTP API"): the
// routes cfg has what it takes to serve, plus /healthz. A nil logger logs
// nothing. Serve it with NewServer, which bounds what a client may hold.
func New(cfg *Config, logger *zap.Logger) (http.Handler, error) {
	c := cfg.withDefaults()
	if err := c.validate(); err != nil {
		return nil, fmt.Errorf("invalid HTTP config: %w", err)
	}
	if logger == nil {
		logger = zap.NewNop()
	}
	h := &handler{cfg: c, writer: c.Writer, logger: logger.Named("http"), mux: http.NewServeMux(), decodes: make(chan struct{}, c.MaxDecodes)}
	h.tokens = c.tokens()
	h.retryAfter = strconv.FormatInt(int64(math.Ceil(c.RetryAfter.Seconds())), 10)
	if reg := c.Registerer; reg != nil {
		var err error
		h.requests, err = ometrics.Register(reg, prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: ometrics.Namespace, Name: "http_requests_total",
			Help: "HTTP requests served, by route and status code.",
		}, []string{"route", "code"}))
		if err != nil {
			return nil, err
		}
		h.duration, err = ometrics.Register(reg, prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Namespace: ometrics.Namespace, Name: "http_request_duration_seconds",
			Help: "Latency of the HTTP API, by route.", Buckets: prometheus.DefBuckets,
		}, []string{"route"}))
		if err != nil {
			return nil, err
		}
		h.inFlight, err = ometrics.Register(reg, prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Namespace: ometrics.Namespace, Name: "http_requests_in_flight",
			Help: "HTTP requests being served, by route.",
		}, []string{"route"}))
		if err != nil {
			return nil, err
		}
	}
	if h.writer != nil {
		var err error
		if h.ingest, err = newIngestMetrics(c.Registerer, h.writer.Stream()); err != nil {
			return nil, err
		}
		h.writes = &writeHealth{hold: c.RetryAfter}
	}
	if c.Console {
		instance := "outboxd"
		if c.Admin != nil {
			instance = c.Admin.Role()
		}
		var err error
		h.console, err = console.New(&console.Config{ReadOnly: c.ReadOnly, Instance: instance, AuthRequired: len(h.tokens) > 0})
		if err != nil {
			return nil, fmt.Errorf("error building the console: %w", err)
		}
	}
	h.routes()
	for _, rt := range c.Routes {
		if err := h.handleOwn(rt); err != nil {
			return nil, err
		}
	}
	return h, nil
}

// handleOwn registers a program's own route behind the ingest scope. A
// pattern ServeMux refuses (malformed, or in conflict with one of
// outboxd's routes or another of the program's) is an error, not the
// panic ServeMux.Handle raises.
func (h *handler) handleOwn(rt Route) (err error) {
	if rt.Handler == nil {
		return fmt.Errorf("invalid HTTP config: route %q has no handler", rt.Pattern)
	}
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("invalid HTTP config: route %q: %v", rt.Pattern, r)
		}
	}()
	h.mux.Handle(rt.Pattern, guard(accessIngest, rt.Handler))
	if h.own == nil {
		h.own = map[string]bool{}
	}
	h.own[rt.Pattern] = true
	return nil
}

// route is one entry of the route table: what it serves and what it asks
// of the caller's token.
type route struct {
	method  string
	path    string
	handler http.Handler
	access  access
}

func (h *handler) routes() {
	routes := []route{
		{http.MethodGet, "/healthz", http.HandlerFunc(h.healthz), accessOpen},
		{http.MethodGet, "/readyz", http.HandlerFunc(h.readyz), accessOpen},
		{http.MethodGet, "/v1/whoami", http.HandlerFunc(h.whoami), accessAny},
	}
	if h.writer != nil {
		routes = append(routes,
			route{http.MethodPost, "/v1/events", http.HandlerFunc(h.postEvent), accessIngest},
			route{http.MethodPost, "/v1/events:batch", http.HandlerFunc(h.postBatch), accessIngest})
	}
	if h.cfg.Store != nil {
		routes = append(routes, route{http.MethodGet, "/v1/events/{id}", http.HandlerFunc(h.getEvent), accessView})
	}
	if h.cfg.Status != nil {
		routes = append(routes, route{http.MethodGet, "/v1/status", http.HandlerFunc(h.status), accessView})
	}
	if h.cfg.History != nil {
		routes = append(routes, route{http.MethodGet, "/v1/status/history", http.HandlerFunc(h.history), accessView})
	}
	if h.cfg.Admin != nil {
		routes = append(routes, h.adminRoutes()...)
	}
	if h.console != nil {
		routes = append(routes,
			route{http.MethodGet, "/ui", http.RedirectHandler(console.Prefix, http.StatusMovedPermanently), accessOpen},
			route{http.MethodGet, console.Prefix, h.console, accessOpen})
	}
	if h.cfg.Metrics != nil {
		routes = append(routes, route{http.MethodGet, "/metrics", h.cfg.Metrics, accessOpen})
	}
	if h.cfg.Profiles {
		routes = append(routes, profileRoutes()...)
	}
	for _, rt := range routes {
		h.mux.Handle(rt.method+" "+rt.path, guard(rt.access, rt.handler))
		// The same path without a method catches every other method, so a
		// 405 is a problem document too (ServeMux's own is plain text).
		allow := rt.method
		if rt.method == http.MethodGet {
			allow = "GET, HEAD"
		}
		h.mux.HandleFunc(rt.path, func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Allow", allow)
			writeProblem(w, r, newProblem(http.StatusMethodNotAllowed, "", "", fmt.Sprintf("%s does not allow %s; use %s", rt.path, r.Method, allow)))
		})
	}
	h.mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		writeProblem(w, r, newProblem(http.StatusNotFound, "", "", "no such route"))
	})
}

// ServeHTTP checks the caller (its bearer token, or the Host when the
// instance has no token: admit), routes (each route checks the token's
// scope), and counts.
func (h *handler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	start := time.Now()
	rec := &statusRecorder{ResponseWriter: w}
	var route string
	if h.requests != nil {
		_, route = h.mux.Handler(r)
		h.inFlight.WithLabelValues(route).Inc()
		defer h.inFlight.WithLabelValues(route).Dec()
	}
	if admitted, ok := h.admit(rec, r); ok {
		h.mux.ServeHTTP(rec, admitted)
		// The mux records the route on the request it served, a copy
		// carrying the scope; hand it back so that a middleware outside
		// (the tracing one names its span by it) sees the route too.
		r.Pattern = admitted.Pattern
	}
	if h.requests != nil {
		h.requests.WithLabelValues(route, strconv.Itoa(cmp.Or(rec.code, http.StatusOK))).Inc()
		h.duration.WithLabelValues(route).Observe(time.Since(start).Seconds())
	}
}
