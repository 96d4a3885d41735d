package outbox

import (
	"bytes"
	"cmp"
	"context"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"mime"
	"net/http"
	"reflect"
	"strconv"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/256dpi/lungo"
	"github.com/prometheus/client_golang/prometheus"
	"go.mongodb.org/mongo-driver/bson"
	"go.mongodb.org/mongo-driver/mongo"
	"go.mongodb.org/mongo-driver/mongo/options"
	"go.uber.org/zap"

	"github.com/outboxd/outboxd/internal/metrics"
	"github.com/outboxd/outboxd/internal/mongodb"
)

// Defaults of HandlerConfig.
const (
	// MaxBodyDefault is the largest accepted request body (--max-body).
	MaxBodyDefault int64 = 1 << 20
	// MaxBatchDefault is the most events one batch may hold (--max-batch).
	MaxBatchDefault = 500
	// RetryAfterDefault is what a 503 tells clients to wait.
	RetryAfterDefault = 5 * time.Second
)

// IdempotencyKeyHeader carries the idempotency key of POST /v1/events.
const IdempotencyKeyHeader = "Idempotency-Key"

// HandlerConfig configures the ingest HTTP handler. A nil config means all
// defaults.
type HandlerConfig struct {
	// AuthToken, when set, is the bearer token every /v1/ request must carry;
	// /healthz, /readyz and /metrics stay open. Defaults to "" (no auth).
	AuthToken string
	// MaxBody bounds a request body in bytes; larger bodies get 413. Defaults
	// to MaxBodyDefault (1 MiB).
	MaxBody int64
	// MaxBatch bounds the events of one POST /v1/events:batch. Defaults to
	// MaxBatchDefault (500).
	MaxBatch int
	// RetryAfter is sent, rounded up to whole seconds, in the Retry-After
	// header of a 503. Defaults to RetryAfterDefault (5 seconds).
	RetryAfter time.Duration
	// Status serves GET /v1/status with the JSON of what it returns. Defaults
	// to nil: the route is not served.
	Status func(ctx context.Context) (any, error)
	// Ready serves GET /readyz: an error means 503. Defaults to a read on the
	// events collection.
	Ready func(ctx context.Context) error
	// Metrics serves GET /metrics. Defaults to nil: the route is not served.
	Metrics http.Handler
	// Registerer, when set, receives outboxd_http_requests_total{route,code}
	// and outboxd_http_request_duration_seconds{route}; collectors already
	// registered by another handler are shared. Defaults to nil (no metrics).
	Registerer prometheus.Registerer
}

func (c *HandlerConfig) withDefaults() HandlerConfig {
	out := HandlerConfig{}
	if c != nil {
		out = *c
	}
	out.MaxBody = cmp.Or(out.MaxBody, MaxBodyDefault)
	out.MaxBatch = cmp.Or(out.MaxBatch, MaxBatchDefault)
	out.RetryAfter = cmp.Or(out.RetryAfter, RetryAfterDefault)
	return out
}

func (c *HandlerConfig) validate() error {
	switch {
	case c.MaxBody < 0:
		return fmt.Errorf("HandlerConfig.MaxBody must not be negative (got %d)", c.MaxBody)
	case c.MaxBatch < 0:
		return fmt.Errorf("HandlerConfig.MaxBatch must not be negative (got %d)", c.MaxBatch)
	case c.RetryAfter < 0:
		return fmt.Errorf("HandlerConfig.RetryAfter must not be negative (got %s)", c.RetryAfter)
	case c.AuthToken != "" && strings.ContainsFunc(c.AuthToken, func(r rune) bool { return unicode.IsSpace(r) || unicode.IsControl(r) }):
		return errors.New("HandlerConfig.AuthToken must not contain spaces or control characters")
	}
	return nil
}

// handler serves the ingest HTTP API.
type handler struct {
	db         lungo.IDatabase
	writer     *Writer
	cfg        HandlerConfig
	tokenHash  [sha256.Size]byte
	retryAfter string
	ready      func(context.Context) error
	logger     *zap.Logger
	mux        *http.ServeMux
	requests   *prometheus.CounterVec
	duration   *prometheus.HistogramVec
}

// NewHandler returns the ingest HTTP API (see DESIGN.md, "HTTP API") on db,
// writing through w. A nil cfg means all defaults; a nil logger logs nothing.
func NewHandler(db lungo.IDatabase, w *Writer, cfg *HandlerConfig, logger *zap.Logger) (http.Handler, error) {
	if db == nil {
		return nil, errors.New("NewHandler: db must not be nil")
	}
	if w == nil {
		return nil, errors.New("NewHandler: writer must not be nil")
	}
	if cfg != nil {
		if err := cfg.validate(); err != nil {
			return nil, err
		}
	}
	if logger == nil {
		logger = zap.NewNop()
	}
	h := &handler{
		db:     db,
		writer: w,
		cfg:    cfg.withDefaults(),
		logger: logger.Named("ingest"),
		mux:    http.NewServeMux(),
	}
	h.tokenHash = sha256.Sum256([]byte(h.cfg.AuthToken))
	h.retryAfter = strconv.FormatInt(int64(math.Ceil(h.cfg.RetryAfter.Seconds())), 10)
	h.ready = h.cfg.Ready
	if h.ready == nil {
		h.ready = h.pingMongo
	}
	if reg := h.cfg.Registerer; reg != nil {
		var err error
		h.requests, err = metrics.Register(reg, prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "outboxd_http_requests_total",
			Help: "HTTP requests served by the ingest API, by route and status code.",
		}, []string{"route", "code"}))
		if err != nil {
			return nil, err
		}
		h.duration, err = metrics.Register(reg, prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "outboxd_http_request_duration_seconds",
			Help:    "Latency of the ingest API, by route.",
			Buckets: prometheus.DefBuckets,
		}, []string{"route"}))
		if err != nil {
			return nil, err
		}
	}
	h.routes()
	return h, nil
}

func (h *handler) routes() {
	type route struct {
		method  string
		path    string
		handler http.Handler
	}
	routes := []route{
		{http.MethodPost, "/v1/events", http.HandlerFunc(h.postEvent)},
		{http.MethodPost, "/v1/events:batch", http.HandlerFunc(h.postBatch)},
		{http.MethodGet, "/v1/events/{id}", http.HandlerFunc(h.getEvent)},
		{http.MethodGet, "/healthz", http.HandlerFunc(h.healthz)},
		{http.MethodGet, "/readyz", http.HandlerFunc(h.readyz)},
	}
	if h.cfg.Status != nil {
		routes = append(routes, route{http.MethodGet, "/v1/status", http.HandlerFunc(h.status)})
	}
	if h.cfg.Metrics != nil {
		routes = append(routes, route{http.MethodGet, "/metrics", h.cfg.Metrics})
	}
	for _, rt := range routes {
		h.mux.Handle(rt.method+" "+rt.path, rt.handler)
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

// ServeHTTP checks the bearer token of /v1/ requests, routes, and counts.
func (h *handler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	start := time.Now()
	rec := &statusRecorder{ResponseWriter: w}
	if h.cfg.AuthToken != "" && protected(r) && !h.authorized(r) {
		rec.Header().Set("WWW-Authenticate", `Bearer realm="outboxd"`)
		writeProblem(rec, r, newProblem(http.StatusUnauthorized, "", "", "a valid bearer token is required"))
	} else {
		h.mux.ServeHTTP(rec, r)
	}
	if h.requests != nil {
		_, route := h.mux.Handler(r)
		h.requests.WithLabelValues(route, strconv.Itoa(cmp.Or(rec.code, http.StatusOK))).Inc()
		h.duration.WithLabelValues(route).Observe(time.Since(start).Seconds())
	}
}

// protected reports a request under /v1 (fail closed: /v1x too). It looks at the decoded and the
// raw path so that an escaped slash cannot slip past.
func protected(r *http.Request) bool {
	return strings.HasPrefix(r.URL.Path, "/v1") || strings.HasPrefix(r.URL.EscapedPath(), "/v1")
}

func (h *handler) authorized(r *http.Request) bool {
	scheme, token, ok := strings.Cut(r.Header.Get("Authorization"), " ")
	if !ok || !strings.EqualFold(scheme, "Bearer") {
		return false
	}
	// Hashing first makes the comparison constant-time in the length too.
	got := sha256.Sum256([]byte(strings.TrimSpace(token)))
	return subtle.ConstantTimeCompare(got[:], h.tokenHash[:]) == 1
}

func (h *handler) postEvent(w http.ResponseWriter, r *http.Request) {
	keys := r.Header.Values(IdempotencyKeyHeader)
	switch {
	case len(keys) > 1:
		h.fail(w, r, fieldError(IdempotencyKeyHeader, "must be sent once"), "")
		return
	case len(keys) == 1 && keys[0] == "":
		h.fail(w, r, fieldError(IdempotencyKeyHeader, "must not be empty"), "")
		return
	}
	body, ok := h.readBody(w, r)
	if !ok {
		return
	}
	inputs, batch, err := decodeEvent(h.writer, body, r.Header.Get(IdempotencyKeyHeader))
	if err != nil {
		h.fail(w, r, err, "")
		return
	}
	res, err := h.writer.WriteBatch(r.Context(), batch)
	if err != nil {
		field := "idempotencyKey"
		if len(keys) == 1 {
			field = IdempotencyKeyHeader
		}
		h.fail(w, r, err, field, zap.String("idempotency_key", inputs[0].IdempotencyKey))
		return
	}
	status := http.StatusCreated
	if res[0].Duplicate {
		status = http.StatusOK
	}
	w.Header().Set("Location", "/v1/events/"+res[0].ID)
	writeJSON(w, r, status, res[0])
}

// batchResponse is the body of a successful POST /v1/events:batch.
type batchResponse struct {
	Results []Result `json:"results"`
}

func (h *handler) postBatch(w http.ResponseWriter, r *http.Request) {
	body, ok := h.readBody(w, r)
	if !ok {
		return
	}
	inputs, batch, err := decodeBatch(h.writer, body, h.cfg.MaxBatch)
	if err != nil {
		h.fail(w, r, err, "")
		return
	}
	res, err := h.writer.WriteBatch(r.Context(), batch)
	if err != nil {
		h.fail(w, r, err, "", zap.Int("events", len(inputs)))
		return
	}
	writeJSON(w, r, http.StatusOK, batchResponse{Results: res})
}

// eventView is the JSON of GET /v1/events/{id}.
type eventView struct {
	ID             string          `json:"id"`
	IdempotencyKey string          `json:"idempotencyKey"`
	SourceKey      string          `json:"sourceKey"`
	DeviceKey      string          `json:"deviceKey"`
	Type           string          `json:"type"`
	OccurredAt     time.Time       `json:"occurredAt"`
	Payload        json.RawMessage `json:"payload"`
	CreatedAt      time.Time       `json:"createdAt"`
	State          string          `json:"state"`
	SyncedAt       *time.Time      `json:"syncedAt"`
	RequeueCount   int64           `json:"requeueCount"`
	SyncFailure    *SyncFailure    `json:"syncFailure"`
}

func (h *handler) getEvent(w http.ResponseWriter, r *http.Request) {
	id := r.PathValue("id")
	ev, err := FindEvent(r.Context(), h.db, id)
	if errors.Is(err, ErrNotFound) {
		writeProblem(w, r, newProblem(http.StatusNotFound, "", "", "no event has this id"))
		return
	}
	if err != nil {
		h.fail(w, r, err, "", zap.String("event_id", id))
		return
	}
	// Relaxed extended JSON turns BSON documents, arrays and numbers back
	// into plain JSON (the payload came in as JSON, so it holds no dates).
	if ev.Payload == nil {
		ev.Payload = bson.M{}
	}
	payload, err := bson.MarshalExtJSON(ev.Payload, false, false)
	if err != nil {
		h.fail(w, r, fmt.Errorf("error encoding the payload of event %s: %w", id, err), "", zap.String("event_id", id))
		return
	}
	view := eventView{
		ID: ev.ID.Hex(), IdempotencyKey: ev.IdempotencyKey, SourceKey: ev.SourceKey, DeviceKey: ev.DeviceKey,
		Type: ev.Type, OccurredAt: ev.OccurredAt.UTC(), Payload: payload, CreatedAt: ev.CreatedAt.UTC(),
		State: ev.State(), SyncedAt: utc(ev.SyncedAt), RequeueCount: ev.RequeueCount, SyncFailure: ev.SyncFailure,
	}
	writeJSON(w, r, http.StatusOK, view)
}

func utc(t *time.Time) *time.Time {
	if t == nil {
		return nil
	}
	u := t.UTC()
	return &u
}

func (h *handler) healthz(w http.ResponseWriter, r *http.Request) {
	writeJSON(w, r, http.StatusOK, map[string]string{"status": "ok"})
}

func (h *handler) readyz(w http.ResponseWriter, r *http.Request) {
	if err := h.ready(r.Context()); err != nil {
		// The route is open, so the reason goes to the log, not the answer.
		h.logger.Warn("Not ready", zap.Error(err))
		w.Header().Set("Retry-After", h.retryAfter)
		writeProblem(w, r, newProblem(http.StatusServiceUnavailable, "", "", "a dependency is unreachable"))
		return
	}
	writeJSON(w, r, http.StatusOK, map[string]string{"status": "ok"})
}

// pingMongo is the default readiness check: a read that needs a live engine
// (the embedded engine's Ping always succeeds).
func (h *handler) pingMongo(ctx context.Context) error {
	err := h.db.Collection(EventsCollection).FindOne(ctx, bson.M{}, options.FindOne().SetProjection(bson.M{"_id": 1})).Err()
	if err != nil && !errors.Is(err, mongo.ErrNoDocuments) {
		return fmt.Errorf("error reading from MongoDB: %w", err)
	}
	return nil
}

func (h *handler) status(w http.ResponseWriter, r *http.Request) {
	v, err := h.cfg.Status(r.Context())
	if err != nil {
		h.fail(w, r, err, "")
		return
	}
	writeJSON(w, r, http.StatusOK, v)
}

// readBody checks the content type and reads the body up to MaxBody. On
// failure it has answered and returns false.
func (h *handler) readBody(w http.ResponseWriter, r *http.Request) ([]byte, bool) {
	if !isJSON(r.Header.Get("Content-Type")) {
		writeProblem(w, r, newProblem(http.StatusUnsupportedMediaType, "", "", "Content-Type must be application/json (charset utf-8, if any)"))
		return nil, false
	}
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, h.cfg.MaxBody))
	var tooLarge *http.MaxBytesError
	switch {
	case errors.As(err, &tooLarge):
		writeProblem(w, r, newProblem(http.StatusRequestEntityTooLarge, "", "", fmt.Sprintf("the body is larger than %d bytes", tooLarge.Limit)))
		return nil, false
	case err != nil:
		writeProblem(w, r, newProblem(http.StatusBadRequest, ProblemMalformed, "Malformed request", "the body could not be read"))
		return nil, false
	}
	return body, true
}

// isJSON accepts application/json with no charset or charset utf-8.
func isJSON(contentType string) bool {
	mt, params, err := mime.ParseMediaType(contentType)
	if err != nil || mt != "application/json" {
		return false
	}
	cs, ok := params["charset"]
	return !ok || strings.EqualFold(cs, "utf-8")
}

// fail answers err: 400 for a malformed body, 422 for invalid fields or a
// reused idempotency key (named keyField, or events[i].idempotencyKey in a
// batch), 503 when MongoDB is unreachable, 500 otherwise. Only ids go to the
// log, never payloads.
func (h *handler) fail(w http.ResponseWriter, r *http.Request, err error, keyField string, ids ...zap.Field) {
	var (
		re *requestError
		ve *ValidationError
		me *MismatchError
	)
	switch {
	case errors.As(err, &re):
		p := newProblem(http.StatusBadRequest, ProblemMalformed, "Malformed request", re.detail)
		if re.field != "" {
			p.Errors = []FieldError{{Field: re.field, Reason: "is not a known field"}}
		}
		writeProblem(w, r, p)
	case errors.As(err, &ve):
		p := newProblem(http.StatusUnprocessableEntity, ProblemValidation, "Invalid fields", ve.Error())
		p.Errors = ve.Fields
		writeProblem(w, r, p)
	case errors.As(err, &me):
		field := cmp.Or(keyField, fmt.Sprintf("events[%d].idempotencyKey", me.Index))
		p := newProblem(http.StatusUnprocessableEntity, ProblemMismatch, "Idempotency key reused",
			fmt.Sprintf("the idempotency key already names event %s, whose content differs", me.ExistingID))
		p.Errors = []FieldError{{Field: field, Reason: "was already used for an event with different content"}}
		writeProblem(w, r, p)
	case mongodb.IsUnavailable(err):
		h.logger.Warn("MongoDB unavailable", append(ids, zap.String("path", r.URL.Path), zap.Error(err))...)
		w.Header().Set("Retry-After", h.retryAfter)
		writeProblem(w, r, newProblem(http.StatusServiceUnavailable, ProblemUnavailable, "Store unavailable", "MongoDB is unreachable; retry later"))
	case errors.Is(err, context.Canceled) && r.Context().Err() != nil:
		// The client went away; nobody reads this answer.
		h.logger.Debug("Request cancelled", append(ids, zap.String("path", r.URL.Path))...)
		w.Header().Set("Retry-After", h.retryAfter)
		writeProblem(w, r, newProblem(http.StatusServiceUnavailable, "", "", "the request was cancelled"))
	default:
		h.logger.Error("Request failed", append(ids, zap.String("path", r.URL.Path), zap.Error(err))...)
		writeProblem(w, r, newProblem(http.StatusInternalServerError, "", "", "the request could not be completed"))
	}
}

// requestError is a body that is not the JSON the route expects (400).
type requestError struct {
	detail string
	// field is set for an unknown field.
	field string
}

func (e *requestError) Error() string { return e.detail }

func fieldError(field, reason string) *ValidationError {
	return &ValidationError{Fields: []FieldError{{Field: field, Reason: reason}}}
}

// decodeEvent decodes and validates the body of POST /v1/events. headerKey is
// the Idempotency-Key header ("" when absent). It returns the one Input and
// its Batch from w.Prepare, a *requestError (400) or a *ValidationError (422).
func decodeEvent(w *Writer, body []byte, headerKey string) ([]Input, *Batch, error) {
	var in Input
	if err := decodeObject(body, &in, ""); err != nil {
		return nil, nil, err
	}
	if headerKey != "" {
		if in.IdempotencyKey != "" && in.IdempotencyKey != headerKey {
			return nil, nil, fieldError("idempotencyKey", "differs from the "+IdempotencyKeyHeader+" header")
		}
		in.IdempotencyKey = headerKey
	}
	inputs := []Input{in}
	batch, err := w.Prepare(inputs)
	if err != nil {
		var ve *ValidationError
		if headerKey != "" && errors.As(err, &ve) {
			for i := range ve.Fields {
				if ve.Fields[i].Field == "idempotencyKey" {
					ve.Fields[i].Field = IdempotencyKeyHeader
				}
			}
		}
		return nil, nil, err
	}
	return inputs, batch, nil
}

// decodeBatch decodes and validates the body of POST /v1/events:batch
// ({"events":[…]}, 1 to maxBatch items). It returns the Inputs in request
// order and their Batch from w.Prepare, a *requestError (400) or a
// *ValidationError (422) whose fields are named events[i].field.
func decodeBatch(w *Writer, body []byte, maxBatch int) ([]Input, *Batch, error) {
	var req struct {
		Events []json.RawMessage `json:"events"`
	}
	if err := decodeObject(body, &req, ""); err != nil {
		return nil, nil, err
	}
	switch {
	case len(req.Events) == 0:
		return nil, nil, fieldError("events", "must hold at least one event")
	case len(req.Events) > maxBatch:
		return nil, nil, fieldError("events", fmt.Sprintf("must hold at most %d events (got %d)", maxBatch, len(req.Events)))
	}
	inputs := make([]Input, len(req.Events))
	var fields []FieldError
	for i, raw := range req.Events {
		prefix := fmt.Sprintf("events[%d].", i)
		if !isObject(raw) {
			fields = append(fields, FieldError{Field: strings.TrimSuffix(prefix, "."), Reason: "must be a JSON object"})
			continue
		}
		err := decodeObject(raw, &inputs[i], prefix)
		var ve *ValidationError
		if errors.As(err, &ve) {
			fields = append(fields, ve.Fields...)
		} else if err != nil {
			return nil, nil, err
		}
	}
	if len(fields) > 0 {
		return nil, nil, &ValidationError{Fields: fields}
	}
	batch, err := w.Prepare(inputs)
	if err != nil {
		// Prepare names fields without an index when there is one input.
		var ve *ValidationError
		if len(inputs) == 1 && errors.As(err, &ve) {
			for i := range ve.Fields {
				ve.Fields[i].Field = "events[0]." + ve.Fields[i].Field
			}
		}
		return nil, nil, err
	}
	return inputs, batch, nil
}

// isObject reports whether the JSON value data starts an object.
func isObject(data []byte) bool {
	data = bytes.TrimLeft(data, " \t\r\n")
	return len(data) > 0 && data[0] == '{'
}

// decodeObject strictly decodes one JSON object from data into v: valid
// UTF-8, no unknown fields, nothing after the value. Field names in errors
// carry prefix.
func decodeObject(data []byte, v any, prefix string) error {
	// encoding/json replaces invalid UTF-8 with U+FFFD silently.
	if !utf8.Valid(data) {
		return &requestError{detail: "the body is not valid UTF-8"}
	}
	if len(bytes.TrimLeft(data, " \t\r\n")) == 0 {
		return &requestError{detail: "the body is empty"}
	}
	if !isObject(data) {
		return &requestError{detail: "the body must be a JSON object"}
	}
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return decodeError(err, prefix)
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		return &requestError{detail: "the body holds data after the JSON object"}
	}
	return nil
}

// decodeError translates an encoding/json error.
func decodeError(err error, prefix string) error {
	var (
		se *json.SyntaxError
		te *json.UnmarshalTypeError
	)
	switch {
	case errors.Is(err, io.ErrUnexpectedEOF):
		return &requestError{detail: "malformed JSON: the body ends inside a value"}
	case errors.As(err, &se):
		return &requestError{detail: fmt.Sprintf("malformed JSON at byte %d: %s", se.Offset, strings.TrimPrefix(se.Error(), "json: "))}
	case errors.As(err, &te) && te.Field != "":
		return fieldError(prefix+te.Field, fmt.Sprintf("must be %s, not %s", jsonKind(te.Type), te.Value))
	case errors.As(err, &te):
		return &requestError{detail: "the body must be a JSON object"}
	}
	// encoding/json has no type for an unknown field, only this message.
	if name, ok := strings.CutPrefix(err.Error(), "json: unknown field "); ok {
		if unq, uerr := strconv.Unquote(name); uerr == nil {
			name = unq
		}
		return &requestError{detail: fmt.Sprintf("unknown field %q", prefix+name), field: prefix + name}
	}
	return &requestError{detail: "malformed JSON: " + strings.TrimPrefix(err.Error(), "json: ")}
}

// jsonKind names the JSON kind that fits Go type t.
func jsonKind(t reflect.Type) string {
	if t == nil {
		return "another type"
	}
	switch t.Kind() {
	case reflect.String:
		return "a string"
	case reflect.Slice, reflect.Array:
		return "an array"
	case reflect.Struct, reflect.Map:
		return "an object"
	case reflect.Bool:
		return "a boolean"
	default:
		return "a number"
	}
}

// statusRecorder remembers the status code for the metrics.
type statusRecorder struct {
	http.ResponseWriter
	code int
}

func (s *statusRecorder) WriteHeader(code int) {
	if s.code == 0 {
		s.code = code
	}
	s.ResponseWriter.WriteHeader(code)
}

func (s *statusRecorder) Write(b []byte) (int, error) {
	if s.code == 0 {
		s.code = http.StatusOK
	}
	return s.ResponseWriter.Write(b)
}

// Unwrap lets http.ResponseController reach the connection.
func (s *statusRecorder) Unwrap() http.ResponseWriter { return s.ResponseWriter }
