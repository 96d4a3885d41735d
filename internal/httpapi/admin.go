package httpapi

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"mime"
	"net/http"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"time"

	"go.uber.org/zap"

	"github.com/outboxd/outboxd/internal/operator"
	"github.com/outboxd/outboxd/store"
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
	// ProblemCancelled: the replay this chunk belongs to was cancelled
	// (POST /v1/admin/replay:cancel); start a new replay.
	ProblemCancelled = "urn:outboxd:problem:replay-cancelled"
)

// adminBodyMax bounds an admin request body.
const adminBodyMax = 1 << 20

// ReplayRequest is the body of POST /v1/admin/replay: an
// operator.ReplayQuery with its times in RFC 3339. From and To are
// required.
type ReplayRequest struct {
	From      string `json:"from"`
	To        string `json:"to"`
	By        string `json:"by,omitempty"`
	SourceKey string `json:"sourceKey,omitempty"`
	DeviceKey string `json:"deviceKey,omitempty"`
	State     string `json:"state,omitempty"`
	DryRun    bool   `json:"dryRun,omitempty"`
	Rebuild   bool   `json:"rebuild,omitempty"`
	After     string `json:"after,omitempty"`
	Limit     int    `json:"limit,omitempty"`
	// Entities replays each of these ("sourceKey" or
	// "sourceKey/deviceKey") in turn, in place of sourceKey and deviceKey;
	// Type keeps the originals of this type.
	Entities []string `json:"entities,omitempty"`
	Type     string   `json:"type,omitempty"`
	// EntityRanges replays each of these ranges of one source's devices
	// ({"sourceKey", "from", "to"}: the deviceKeys between from and to,
	// both included, in byte order) in turn, after entities.
	EntityRanges []operator.EntityRange `json:"entityRanges,omitempty"`
	// Started is the started of the replay's first chunk (RFC 3339), sent
	// with each further chunk so that a cancel stops the replay.
	Started string `json:"started,omitempty"`
}

// query parses r into the operator's query.
func (r ReplayRequest) query() (operator.ReplayQuery, error) {
	q, err := eventsQuery(r.From, r.To, r.By, r.SourceKey, r.DeviceKey, r.State, r.After, r.Limit)
	if err != nil {
		return operator.ReplayQuery{}, err
	}
	started, err := parseTime(r.Started, "started")
	return operator.ReplayQuery{EventsQuery: q, DryRun: r.DryRun, Rebuild: r.Rebuild, Started: started,
		Entities: r.Entities, EntityRanges: r.EntityRanges, Type: r.Type}, err
}

// PauseRequest is the body of POST /v1/admin/pause and /v1/admin/resume:
// the stage (relay, relay:<partition>, projection, replay, or
// projection:<group>, replay:<group>) and, for a pause, who pauses.
type PauseRequest struct {
	Stage string `json:"stage"`
	By    string `json:"by,omitempty"`
}

// CancelRequest is the body of POST /v1/admin/replay:cancel (empty).
type CancelRequest struct{}

// VerifyRequest is the body of POST /v1/admin/verify: an
// operator.VerifyQuery with its times in RFC 3339 (an empty bound is open).
type VerifyRequest struct {
	From   string `json:"from,omitempty"`
	To     string `json:"to,omitempty"`
	Repair bool   `json:"repair,omitempty"`
	After  string `json:"after,omitempty"`
	Limit  int    `json:"limit,omitempty"`
}

// RetriesRequest is the body of POST /v1/admin/retries:resume: the class
// whose halted retries to resume (infrastructure, record or unknown).
type RetriesRequest struct {
	Class string `json:"class"`
}

// query parses r into the operator's query.
func (r VerifyRequest) query() (operator.VerifyQuery, error) {
	from, to, err := window(r.From, r.To)
	return operator.VerifyQuery{From: from, To: to, Repair: r.Repair, After: r.After, Limit: r.Limit}, err
}

// eventsQuery parses the fields of a listing or replay.
func eventsQuery(from, to, by, source, device, state, after string, limit int) (operator.EventsQuery, error) {
	f, t, err := window(from, to)
	return operator.EventsQuery{By: store.TimeField(by), From: f, To: t, SourceKey: source, DeviceKey: device,
		State: state, After: after, Limit: limit}, err
}

// window parses the RFC 3339 bounds from and to; an empty one is the zero
// time (open, or missing: the operator says which it may be).
func window(from, to string) (f, t time.Time, err error) {
	if f, err = parseTime(from, "from"); err == nil {
		t, err = parseTime(to, "to")
	}
	return f, t, err
}

// parseTime reads the RFC 3339 time v of field; "" is the zero time.
func parseTime(v, field string) (time.Time, error) {
	if v == "" {
		return time.Time{}, nil
	}
	t, err := time.Parse(time.RFC3339Nano, v)
	if err != nil {
		return time.Time{}, operator.Invalid(field, "must be an RFC 3339 time (2026-11-29T09:00:00Z), got %q", v)
	}
	return t.UTC(), nil
}

// adminRoutes returns the admin API's routes.
func (h *handler) adminRoutes() []route {
	op := h.cfg.Admin
	return []route{
		{http.MethodGet, "/v1/admin/dlq", adminAnswer(h, func(_ http.ResponseWriter, r *http.Request) (*operator.DLQPage, error) {
			q := r.URL.Query()
			limit, err := queryInt(q.Get("limit"), "limit", operator.ChunkDefault)
			if err != nil {
				return nil, err
			}
			since, err := parseTime(q.Get("since"), "since")
			if err != nil {
				return nil, err
			}
			until, err := parseTime(q.Get("until"), "until")
			if err != nil {
				return nil, err
			}
			return op.ListDLQ(r.Context(), operator.DLQQuery{Category: q.Get("category"), Code: q.Get("code"), Error: q.Get("error"),
				SourceKey: q.Get("sourceKey"), DeviceKey: q.Get("deviceKey"), Type: q.Get("type"), Since: since, Until: until,
				Payload: q.Get("payload"), After: q.Get("after"), Limit: limit})
		}), accessView},
		{http.MethodGet, "/v1/admin/dlq/{id}", adminAnswer(h, func(_ http.ResponseWriter, r *http.Request) (*operator.DeadLetter, error) {
			return op.DeadLetter(r.Context(), r.PathValue("id"))
		}), accessView},
		{http.MethodPost, "/v1/admin/dlq:replay", adminPost(h, op.ReplayDLQ, always[operator.DLQAction]), accessOperate},
		{http.MethodPost, "/v1/admin/dlq:drop", adminPost(h, op.DropDLQ, always[operator.DLQAction]), accessOperate},
		{http.MethodGet, "/v1/admin/events", adminAnswer(h, func(_ http.ResponseWriter, r *http.Request) (*operator.EventsPage, error) {
			q := r.URL.Query()
			limit, err := queryInt(q.Get("limit"), "limit", operator.ChunkDefault)
			if err != nil {
				return nil, err
			}
			eq, err := eventsQuery(q.Get("from"), q.Get("to"), q.Get("by"), q.Get("sourceKey"), q.Get("deviceKey"), q.Get("state"), q.Get("after"), limit)
			if err != nil {
				return nil, err
			}
			return op.ListEvents(r.Context(), eq)
		}), accessView},
		{http.MethodGet, "/v1/admin/events/{ref}/journey", adminAnswer(h, func(_ http.ResponseWriter, r *http.Request) (*operator.Journey, error) {
			return op.Journey(r.Context(), r.PathValue("ref"))
		}), accessView},
		{http.MethodPost, "/v1/admin/replay", adminPost(h, func(ctx context.Context, r ReplayRequest) (*operator.ReplayResult, error) {
			q, err := r.query()
			if err != nil {
				return nil, err
			}
			return op.Replay(ctx, q)
		}, func(r ReplayRequest) bool { return !r.DryRun }), accessView},
		{http.MethodPost, "/v1/admin/verify", adminPost(h, func(ctx context.Context, r VerifyRequest) (*operator.VerifyResult, error) {
			q, err := r.query()
			if err != nil {
				return nil, err
			}
			return op.Verify(ctx, q)
		}, func(r VerifyRequest) bool { return r.Repair }), accessView},
		{http.MethodGet, "/v1/admin/pauses", adminAnswer(h, func(_ http.ResponseWriter, r *http.Request) (*operator.PausesResult, error) {
			return op.Pauses(r.Context())
		}), accessView},
		{http.MethodPost, "/v1/admin/pause", adminPost(h, func(ctx context.Context, r PauseRequest) (*operator.PauseResult, error) {
			return op.Pause(ctx, operator.PauseQuery{Stage: r.Stage, By: r.By})
		}, always[PauseRequest]), accessOperate},
		{http.MethodPost, "/v1/admin/resume", adminPost(h, func(ctx context.Context, r PauseRequest) (*operator.PauseResult, error) {
			return op.Resume(ctx, operator.PauseQuery{Stage: r.Stage})
		}, always[PauseRequest]), accessOperate},
		{http.MethodPost, "/v1/admin/replay:cancel", adminPost(h, func(ctx context.Context, _ CancelRequest) (*operator.CancelResult, error) {
			return op.CancelReplay(ctx)
		}, always[CancelRequest]), accessOperate},
		{http.MethodPost, "/v1/admin/retries:resume", adminPost(h, func(ctx context.Context, r RetriesRequest) (*operator.RetriesResult, error) {
			return op.ResumeRetries(ctx, operator.RetriesQuery{Class: r.Class})
		}, always[RetriesRequest]), accessOperate},
	}
}

// always says that every request of an action changes something.
func always[Req any](Req) bool { return true }

// errReadOnly refuses an action that changes something on a read-only
// instance.
var errReadOnly = errors.New("this instance is read-only (--ui-read-only): it refuses the admin actions that change something (DLQ replay and drop, replay other than a dry run and its cancel, verify --repair, retries resume, pause and resume); ask an instance without the flag")

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
// instance, and a token other than the operator's, are refused (403)
// before acting: the viewer token may run a replay's dry run and verify
// without repair (what a read-only instance answers), not more.
func adminPost[Req, Res any](h *handler, action func(ctx context.Context, req Req) (Res, error), mutates func(Req) bool) http.HandlerFunc {
	return adminAnswer(h, func(w http.ResponseWriter, r *http.Request) (Res, error) {
		var req Req
		var none Res
		if err := h.adminDecode(w, r, &req); err != nil {
			return none, err
		}
		if mutates(req) {
			if h.cfg.ReadOnly {
				return none, errReadOnly
			}
			if !accessOperate.allows(scopeOf(r)) {
				return none, errScope
			}
		}
		return action(r.Context(), req)
	})
}

// queryInt reads a positive integer query parameter (def when empty).
func queryInt(v, field string, def int) (int, error) {
	if v == "" {
		return def, nil
	}
	n, err := strconv.Atoi(v)
	if err != nil || n < 1 || n > operator.ChunkMax {
		return 0, operator.Invalid(field, "must be an integer from 1 to %d", operator.ChunkMax)
	}
	return n, nil
}

// problemError is an error answered with its problem document as it is.
type problemError struct{ p *Problem }

func (e *problemError) Error() string { return e.p.Detail }

// adminDecode reads a JSON request body into v: application/json, at most
// adminBodyMax bytes, one object, no unknown field; otherwise it returns
// the problem to answer (415, 413, 408, 503 or 400).
func (h *handler) adminDecode(w http.ResponseWriter, r *http.Request, v any) error {
	if mt, _, err := mime.ParseMediaType(r.Header.Get("Content-Type")); err != nil || mt != "application/json" {
		return &problemError{newProblem(http.StatusUnsupportedMediaType, "", "", "the body must be application/json")}
	}
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, adminBodyMax))
	if err != nil {
		var mbe *http.MaxBytesError
		if errors.As(err, &mbe) {
			return &problemError{newProblem(http.StatusRequestEntityTooLarge, "", "", fmt.Sprintf("the body is larger than %d bytes", adminBodyMax))}
		}
		// Too many bodies at once is a 503 to retry, not a malformed request.
		return &problemError{h.bodyProblem(w, err)}
	}
	if err := strictMembers(body, jsonNames(reflect.TypeOf(v).Elem())); err != nil {
		return &problemError{newProblem(http.StatusBadRequest, ProblemMalformed, "Malformed request",
			"the body is not one valid JSON object of this request: "+err.Error())}
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

// strictMembers refuses, as ingest does, what encoding/json would take
// loosely: a member named twice in any object (encoding/json keeps the
// last, another reader the first), and a member of the request object
// that names a field in other case ("DRYRUN" for dryRun). Malformed JSON
// is left to the decoder.
func strictMembers(body []byte, fields []string) error {
	dec := json.NewDecoder(bytes.NewReader(body))
	type frame struct {
		object bool
		seen   map[string]bool
		key    bool // the next string token is a member name
	}
	var stack []*frame
	for {
		tok, err := dec.Token()
		if err != nil {
			return nil // the decoder tells
		}
		var top *frame
		if len(stack) > 0 {
			top = stack[len(stack)-1]
		}
		if name, ok := tok.(string); ok && top != nil && top.object && top.key {
			if top.seen[name] {
				return fmt.Errorf("field %q appears more than once", name)
			}
			top.seen[name] = true
			if len(stack) == 1 && !slices.Contains(fields, name) {
				for _, f := range fields {
					if strings.EqualFold(f, name) {
						return fmt.Errorf("unknown field %q (field names are case-sensitive: did you mean %q?)", name, f)
					}
				}
			}
			top.key = false
			continue
		}
		if top != nil && top.object {
			top.key = true // after a value comes the next name
		}
		switch tok {
		case json.Delim('{'):
			stack = append(stack, &frame{object: true, seen: map[string]bool{}, key: true})
		case json.Delim('['):
			stack = append(stack, &frame{})
		case json.Delim('}'), json.Delim(']'):
			stack = stack[:len(stack)-1]
			if len(stack) == 0 {
				return nil
			}
			if p := stack[len(stack)-1]; p.object {
				p.key = true
			}
		}
	}
}

// adminFail answers an error of an admin action: 422 for invalid fields,
// 404 for an unknown dead letter or original, 403 for an action a
// read-only instance refuses, 501 for an action this instance cannot
// perform, 409 for a chunk of a cancelled replay, 503 with Retry-After when a backend is unreachable, 500
// otherwise.
func (h *handler) adminFail(w http.ResponseWriter, r *http.Request, err error) {
	var pe *problemError
	oe := &operator.Error{} // the fields, detail and backend of an operator error
	errors.As(err, &oe)
	switch {
	case errors.As(err, &pe):
		writeProblem(w, r, pe.p)
	case errors.Is(err, operator.ErrInvalid):
		p := newProblem(http.StatusUnprocessableEntity, ProblemValidation, "Invalid fields", oe.Error())
		for _, f := range oe.Fields {
			p.Errors = append(p.Errors, ProblemField{Field: f.Field, Reason: f.Reason})
		}
		writeProblem(w, r, p)
	case errors.Is(err, operator.ErrNotFound):
		writeProblem(w, r, newProblem(http.StatusNotFound, "", "", oe.Detail))
	case errors.Is(err, operator.ErrCancelled):
		writeProblem(w, r, newProblem(http.StatusConflict, ProblemCancelled, "Replay cancelled", oe.Detail))
	case errors.Is(err, errScope):
		forbidScope(w, r, ScopeOperator, scopeOf(r))
	case errors.Is(err, errReadOnly):
		writeProblem(w, r, newProblem(http.StatusForbidden, ProblemReadOnly, "Read-only instance", err.Error()))
	case errors.Is(err, operator.ErrNotAvailable):
		writeProblem(w, r, newProblem(http.StatusNotImplemented, ProblemNotAvailable, "Action not available here", oe.Detail))
	case store.IsUnavailable(err), errors.Is(err, context.DeadlineExceeded) && r.Context().Err() == nil:
		h.logger.Warn("admin action failed: store unavailable", zap.String("path", r.URL.Path), zap.Error(err))
		w.Header().Set("Retry-After", h.retryAfter)
		writeProblem(w, r, newProblem(http.StatusServiceUnavailable, ProblemUnavailable, "Store unavailable", "the store cannot serve now; retry later"))
	case errors.Is(err, operator.ErrUnavailable):
		h.logger.Warn("admin action failed", zap.String("path", r.URL.Path), zap.String("backend", oe.Backend), zap.Error(err))
		w.Header().Set("Retry-After", h.retryAfter)
		writeProblem(w, r, newProblem(http.StatusServiceUnavailable, ProblemBackendUnavailable, "Backend unavailable",
			fmt.Sprintf("%s failed; what was done so far is in the log, and the action can be run again", oe.Backend)))
	case errors.Is(err, context.Canceled) && r.Context().Err() != nil:
		h.logger.Debug("admin request cancelled", zap.String("path", r.URL.Path))
		writeProblem(w, r, newProblem(http.StatusServiceUnavailable, "", "", "the request was cancelled"))
	default:
		h.logger.Error("admin action failed", zap.String("path", r.URL.Path), zap.Error(err))
		writeProblem(w, r, newProblem(http.StatusInternalServerError, "", "", "the action could not be completed"))
	}
}
