package httpapi

import (
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"mime"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap"

	ometrics "github.com/outboxd/outboxd/internal/metrics"
	"github.com/outboxd/outboxd/outbox"
	"github.com/outboxd/outboxd/readmodel"
	"github.com/outboxd/outboxd/store"
	"github.com/outboxd/outboxd/stream"
)

// Problem types of the admin API.
const (
	// ProblemNotAvailable: this instance lacks a backend the action needs
	// (the ingest role has no Redis and no PostgreSQL); ask an instance of
	// a role that has them (dev, work).
	ProblemNotAvailable = "urn:outboxd:problem:action-not-available"
	// ProblemBackendUnavailable: Redis or PostgreSQL cannot be reached now.
	ProblemBackendUnavailable = "urn:outboxd:problem:backend-unavailable"
	// ProblemReadOnly: this instance is read-only (Config.ReadOnly) and
	// refuses the actions that change something.
	ProblemReadOnly = "urn:outboxd:problem:read-only"
)

// Limits of the admin API.
const (
	// AdminChunkDefault is how many originals one replay or verify request
	// handles unless it says otherwise, and how many dead letters a DLQ
	// listing returns.
	AdminChunkDefault = 500
	// AdminChunkMax is the most a request may ask for.
	AdminChunkMax = 5000
	// adminBodyMax bounds an admin request body.
	adminBodyMax = 1 << 20
)

// ReadModel is what the operator actions need of the read model: the
// lookups and repair statements of readmodel.DB (the default projector's
// tables), each in a transaction of its own.
type ReadModel interface {
	Unproject(ctx context.Context, ids []string) (int64, error)
	RecomputeStats(ctx context.Context, keys []readmodel.StatsKey) error
	Projected(ctx context.Context, ids []string) (map[string]bool, error)
	Rows(ctx context.Context, from, to *time.Time, after string, limit int) ([]readmodel.Row, error)
	StatsDrift(ctx context.Context, from, to *time.Time, limit int) ([]readmodel.StatsDrift, error)
	Lookup(ctx context.Context, eventID, idempotencyKey string, key readmodel.StatsKey) (*readmodel.Row, *readmodel.Stats, error)
}

// AdminConfig configures the operator actions of /v1/admin/.
type AdminConfig struct {
	// Store is the system of record. Required.
	Store store.Store
	// Redis holds the stream and the dead-letter stream. Without it the
	// DLQ actions, replay and verify --repair answer 501.
	Redis *stream.Client
	// ReadModel is the read model in PostgreSQL (readmodel.New). Without
	// it verify, replay --rebuild and the journey answer 501.
	ReadModel ReadModel
	// Stream and Group name the stream (its keys are stream.NewKeys(Stream,
	// Group)) and the worker's consumer group. Default to
	// outbox.StreamDefault and stream.GroupDefault.
	Stream, Group string
	// Role names this instance's role in the detail of a 501, so the
	// operator knows to ask another. Defaults to "this role".
	Role string
	// Now tells the time for ages. Defaults to time.Now.
	Now func() time.Time
	// Registerer receives outboxd_admin_published_total{origin}. Defaults
	// to none.
	Registerer prometheus.Registerer
}

// Admin performs the operator actions: it lists, replays and drops dead
// letters, replays originals by boundary and compares the originals with
// the read model. Every action re-enters the normal path (a stream
// message the worker projects idempotently); none writes a read-model row
// itself. It is safe for concurrent use.
type Admin struct {
	cfg       AdminConfig
	keys      stream.Keys
	publisher *stream.Publisher // nil without Redis
	logger    *zap.Logger
	published *prometheus.CounterVec
}

// NewAdmin returns the operator actions over cfg's backends. A nil logger
// logs nothing.
func NewAdmin(cfg *AdminConfig, logger *zap.Logger) (*Admin, error) {
	if cfg == nil || cfg.Store == nil {
		return nil, errors.New("admin: a store is required")
	}
	c := *cfg
	c.Stream = cmp.Or(c.Stream, outbox.StreamDefault)
	c.Group = cmp.Or(c.Group, stream.GroupDefault)
	c.Role = cmp.Or(c.Role, "this role")
	if c.Now == nil {
		c.Now = time.Now
	}
	if logger == nil {
		logger = zap.NewNop()
	}
	f := ometrics.NewFactory(c.Registerer, "admin", c.Stream)
	published := f.CounterVec("published_total", "Originals re-published by operator actions, by origin (replay, dlq-replay).", "origin")
	if err := f.Err(); err != nil {
		return nil, fmt.Errorf("error registering admin metrics: %w", err)
	}
	a := &Admin{cfg: c, keys: stream.NewKeys(c.Stream, c.Group), logger: logger.Named("admin").With(zap.String("stream", c.Stream)), published: published}
	if c.Redis != nil {
		a.publisher = c.Redis.Publisher(a.keys, nil, nil)
	}
	return a, nil
}

// Stream returns the stream the actions work on.
func (a *Admin) Stream() string { return a.cfg.Stream }

// notAvailableError says that this instance lacks a backend an action
// needs.
type notAvailableError struct{ what, role string }

func (e *notAvailableError) Error() string {
	return fmt.Sprintf("this instance (%s) has no %s; run the command against an instance of `outboxd work` or `outboxd dev`", e.role, e.what)
}

func (a *Admin) needRedis() error {
	if a.cfg.Redis == nil {
		return &notAvailableError{what: "Redis", role: a.cfg.Role}
	}
	return nil
}

func (a *Admin) needPostgres() error {
	if a.cfg.ReadModel == nil {
		return &notAvailableError{what: "PostgreSQL", role: a.cfg.Role}
	}
	return nil
}

// invalidError lists invalid fields of an admin request (422).
type invalidError struct{ fields []outbox.FieldError }

func (e *invalidError) Error() string {
	parts := make([]string, len(e.fields))
	for i, f := range e.fields {
		parts[i] = f.Field + " " + f.Reason
	}
	return "invalid request: " + strings.Join(parts, "; ")
}

func invalid(field, format string, args ...any) error {
	return &invalidError{fields: []outbox.FieldError{{Field: field, Reason: fmt.Sprintf(format, args...)}}}
}

// backendError marks a failure of Redis or PostgreSQL.
type backendError struct {
	backend string
	err     error
}

func (e *backendError) Error() string { return fmt.Sprintf("%s: %v", e.backend, e.err) }
func (e *backendError) Unwrap() error { return e.err }

func redisErr(what string, err error) error {
	if err == nil {
		return nil
	}
	return &backendError{backend: "redis", err: fmt.Errorf("error %s: %w", what, err)}
}

func pgErr(what string, err error) error {
	if err == nil {
		return nil
	}
	return &backendError{backend: "postgres", err: fmt.Errorf("error %s: %w", what, err)}
}

// publish adds the messages of events, with origin, to the stream in one
// round trip, and returns which were added (by index); err is set when any
// was not.
func (a *Admin) publish(ctx context.Context, events []*outbox.Event, origin outbox.Origin) ([]bool, error) {
	ok := make([]bool, len(events))
	if len(events) == 0 {
		return ok, nil
	}
	err := a.publisher.PublishEvents(ctx, events, origin)
	n := 0
	for i := range ok {
		if ok[i] = stream.Added(err, i); ok[i] {
			n++
		}
	}
	a.published.WithLabelValues(string(origin)).Add(float64(n))
	if err != nil {
		return ok, redisErr(fmt.Sprintf("publishing %d originals", len(events)), err)
	}
	return ok, nil
}

// adminRoutes returns the admin API's routes.
func (h *handler) adminRoutes() []route {
	return []route{
		{http.MethodGet, "/v1/admin/dlq", adminAnswer(h, func(_ http.ResponseWriter, r *http.Request) (*DLQPage, error) {
			q := r.URL.Query()
			limit, err := queryInt(q.Get("limit"), "limit", AdminChunkDefault)
			if err != nil {
				return nil, err
			}
			return h.cfg.Admin.ListDLQ(r.Context(), DLQQuery{Category: q.Get("category"), Code: q.Get("code"), After: q.Get("after"), Limit: limit})
		})},
		{http.MethodGet, "/v1/admin/dlq/{id}", adminAnswer(h, func(_ http.ResponseWriter, r *http.Request) (*DeadLetter, error) {
			return h.cfg.Admin.DeadLetter(r.Context(), r.PathValue("id"))
		})},
		{http.MethodPost, "/v1/admin/dlq:replay", adminPost(h, (*Admin).ReplayDLQ, always[DLQAction])},
		{http.MethodPost, "/v1/admin/dlq:drop", adminPost(h, (*Admin).DropDLQ, always[DLQAction])},
		{http.MethodGet, "/v1/admin/events", adminAnswer(h, func(_ http.ResponseWriter, r *http.Request) (*EventsPage, error) {
			q := r.URL.Query()
			limit, err := queryInt(q.Get("limit"), "limit", AdminChunkDefault)
			if err != nil {
				return nil, err
			}
			return h.cfg.Admin.ListEvents(r.Context(), ReplayRequest{From: q.Get("from"), To: q.Get("to"), By: q.Get("by"),
				SourceKey: q.Get("sourceKey"), DeviceKey: q.Get("deviceKey"), State: q.Get("state"), After: q.Get("after"), Limit: limit})
		})},
		{http.MethodGet, "/v1/admin/events/{ref}/journey", adminAnswer(h, func(_ http.ResponseWriter, r *http.Request) (*Journey, error) {
			return h.cfg.Admin.Journey(r.Context(), r.PathValue("ref"))
		})},
		{http.MethodPost, "/v1/admin/replay", adminPost(h, (*Admin).Replay, func(r ReplayRequest) bool { return !r.DryRun })},
		{http.MethodPost, "/v1/admin/verify", adminPost(h, (*Admin).Verify, func(r VerifyRequest) bool { return r.Repair })},
	}
}

// always says that every request of an action changes something.
func always[Req any](Req) bool { return true }

// errReadOnly refuses an action that changes something on a read-only
// instance.
var errReadOnly = errors.New("this instance is read-only (--ui-read-only): it refuses the admin actions that change something (DLQ replay and drop, replay other than a dry run, verify --repair); ask an instance without the flag")

// adminAnswer serves an admin route: 200 with what action returns, or the
// problem of its error.
func adminAnswer[Res any](h *handler, action func(w http.ResponseWriter, r *http.Request) (Res, error)) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		res, err := action(w, r)
		if err != nil {
			h.adminFail(w, r, err)
			return
		}
		writeJSON(w, r, http.StatusOK, res)
	}
}

// adminPost serves an action whose request is a JSON body of type Req;
// mutates tells the requests that change something, which a read-only
// instance refuses (403) before acting.
func adminPost[Req, Res any](h *handler, action func(a *Admin, ctx context.Context, req Req) (Res, error), mutates func(Req) bool) http.HandlerFunc {
	return adminAnswer(h, func(w http.ResponseWriter, r *http.Request) (Res, error) {
		var req Req
		var none Res
		if err := adminDecode(w, r, &req); err != nil {
			return none, err
		}
		if h.cfg.ReadOnly && mutates(req) {
			return none, errReadOnly
		}
		return action(h.cfg.Admin, r.Context(), req)
	})
}

// queryInt reads a positive integer query parameter (def when empty).
func queryInt(v, field string, def int) (int, error) {
	if v == "" {
		return def, nil
	}
	n, err := strconv.Atoi(v)
	if err != nil || n < 1 || n > AdminChunkMax {
		return 0, invalid(field, "must be an integer from 1 to %d", AdminChunkMax)
	}
	return n, nil
}

// problemError is an error answered with its problem document as it is.
type problemError struct{ p *Problem }

func (e *problemError) Error() string { return e.p.Detail }

// adminDecode reads a JSON request body into v: application/json, at most
// adminBodyMax bytes, one object, no unknown field; otherwise it returns
// the problem to answer (415, 413 or 400).
func adminDecode(w http.ResponseWriter, r *http.Request, v any) error {
	if mt, _, err := mime.ParseMediaType(r.Header.Get("Content-Type")); err != nil || mt != "application/json" {
		return &problemError{newProblem(http.StatusUnsupportedMediaType, "", "", "the body must be application/json")}
	}
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, adminBodyMax))
	if err != nil {
		var mbe *http.MaxBytesError
		if errors.As(err, &mbe) {
			return &problemError{newProblem(http.StatusRequestEntityTooLarge, "", "", fmt.Sprintf("the body is larger than %d bytes", adminBodyMax))}
		}
		return &problemError{newProblem(http.StatusBadRequest, ProblemMalformed, "Malformed request", "the body could not be read")}
	}
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.DisallowUnknownFields()
	err = dec.Decode(v)
	if err == nil && dec.More() {
		err = errors.New("more than one JSON value")
	}
	if err != nil {
		return &problemError{newProblem(http.StatusBadRequest, ProblemMalformed, "Malformed request",
			"the body is not one valid JSON object of this request: "+err.Error())}
	}
	return nil
}

// adminFail answers an error of an admin action: 422 for invalid fields,
// 404 for an unknown dead letter or original, 403 for an action a
// read-only instance refuses, 501 for an action this instance cannot
// perform, 503 with Retry-After when a backend is unreachable, 500
// otherwise.
func (h *handler) adminFail(w http.ResponseWriter, r *http.Request, err error) {
	var (
		pe *problemError
		ie *invalidError
		na *notAvailableError
		be *backendError
	)
	switch {
	case errors.As(err, &pe):
		writeProblem(w, r, pe.p)
	case errors.As(err, &ie):
		p := newProblem(http.StatusUnprocessableEntity, ProblemValidation, "Invalid fields", ie.Error())
		p.Errors = ie.fields
		writeProblem(w, r, p)
	case errors.Is(err, errNoSuchDeadLetter):
		writeProblem(w, r, newProblem(http.StatusNotFound, "", "", "no dead letter has this id"))
	case errors.Is(err, errNoSuchOriginal):
		writeProblem(w, r, newProblem(http.StatusNotFound, "", "", "no original has this id or idempotency key"))
	case errors.Is(err, errReadOnly):
		writeProblem(w, r, newProblem(http.StatusForbidden, ProblemReadOnly, "Read-only instance", err.Error()))
	case errors.As(err, &na):
		writeProblem(w, r, newProblem(http.StatusNotImplemented, ProblemNotAvailable, "Action not available here", na.Error()))
	case store.IsUnavailable(err), errors.Is(err, context.DeadlineExceeded) && r.Context().Err() == nil:
		h.logger.Warn("admin action failed: store unavailable", zap.String("path", r.URL.Path), zap.Error(err))
		w.Header().Set("Retry-After", h.retryAfter)
		writeProblem(w, r, newProblem(http.StatusServiceUnavailable, ProblemUnavailable, "Store unavailable", "the store cannot serve now; retry later"))
	case errors.As(err, &be):
		h.logger.Warn("admin action failed", zap.String("path", r.URL.Path), zap.String("backend", be.backend), zap.Error(err))
		w.Header().Set("Retry-After", h.retryAfter)
		writeProblem(w, r, newProblem(http.StatusServiceUnavailable, ProblemBackendUnavailable, "Backend unavailable",
			fmt.Sprintf("%s failed; what was done so far is in the log, and the action can be run again", be.backend)))
	case errors.Is(err, context.Canceled) && r.Context().Err() != nil:
		h.logger.Debug("admin request cancelled", zap.String("path", r.URL.Path))
		writeProblem(w, r, newProblem(http.StatusServiceUnavailable, "", "", "the request was cancelled"))
	default:
		h.logger.Error("admin action failed", zap.String("path", r.URL.Path), zap.Error(err))
		writeProblem(w, r, newProblem(http.StatusInternalServerError, "", "", "the action could not be completed"))
	}
}
