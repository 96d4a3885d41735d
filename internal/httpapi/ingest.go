package httpapi

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"net/http"

	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap"

	ometrics "github.com/outboxd/outboxd/internal/metrics"
	"github.com/outboxd/outboxd/internal/operator"
	"github.com/outboxd/outboxd/internal/tracing"
	"github.com/outboxd/outboxd/outbox"
	"github.com/outboxd/outboxd/store"
)

// ingestMetrics count what ingest answered per event: originals created,
// duplicates (the key came again with the same content: 200 with the first
// id) and key mismatches (the key came again with other content: 422).
// The duplicate ratio, duplicates ÷ (created + duplicates), shows how
// often clients retry.
type ingestMetrics struct {
	created, duplicates, mismatches prometheus.Counter
}

func newIngestMetrics(reg prometheus.Registerer, stream string) (*ingestMetrics, error) {
	f := ometrics.NewFactory(reg, "ingest", stream)
	m := &ingestMetrics{
		created: f.Counter("created_total", "Events ingest stored as new originals (201, or a new item of a batch)."),
		duplicates: f.Counter("duplicates_total",
			"Events whose idempotency key was already stored with the same content: answered with the first original's id (duplicate: true), nothing written."),
		mismatches: f.Counter("key_mismatches_total",
			"Requests refused (422) because an idempotency key came again with other content, from the store or within one batch."),
	}
	return m, f.Err()
}

// count adds the outcome of one write: its results, or its error.
func (m *ingestMetrics) count(res []outbox.Result, err error) {
	if err != nil {
		if errors.Is(err, outbox.ErrIdempotencyMismatch) {
			m.mismatches.Inc()
		}
		return
	}
	for _, r := range res {
		if r.Duplicate {
			m.duplicates.Inc()
		} else {
			m.created.Inc()
		}
	}
}

func (h *handler) postEvent(w http.ResponseWriter, r *http.Request) {
	keys := r.Header.Values(IdempotencyKeyHeader)
	switch {
	case len(keys) > 1:
		h.fail(w, r, invalidField(IdempotencyKeyHeader, "must be sent once"), "")
		return
	case len(keys) == 1 && keys[0] == "":
		h.fail(w, r, invalidField(IdempotencyKeyHeader, "must not be empty"), "")
		return
	}
	body, ok := h.readBody(w, r)
	if !ok {
		return
	}
	if !h.decodeTurn(w, r) {
		return
	}
	inputs, batch, err := decodeEvent(h.writer, body, r.Header.Get(IdempotencyKeyHeader), h.decodeOptions(r))
	<-h.decodes
	if err != nil {
		h.fail(w, r, err, "")
		return
	}
	ctx, cancel := context.WithTimeout(r.Context(), h.cfg.RequestTimeout)
	defer cancel()
	res, err := h.write(ctx, batch)
	h.ingest.count(res, err)
	h.writes.record(err)
	if err != nil {
		// The committer refuses an event too large for the store (413).
		err = namedFields(err, func(f outbox.FieldError) string { return f.Field })
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

// write stores batch, a single event's or a batch request's: through the
// committer when there is one, so that concurrent requests of either kind
// share a store transaction (a batch is all or nothing for itself there
// too), else in a transaction of its own.
func (h *handler) write(ctx context.Context, batch *outbox.Batch) ([]outbox.Result, error) {
	if h.cfg.Committer != nil {
		return h.cfg.Committer.Write(ctx, batch)
	}
	return h.writer.WriteBatch(ctx, batch)
}

// batchResponse is the body of a successful POST /v1/events:batch.
type batchResponse struct {
	Results []outbox.Result `json:"results"`
}

func (h *handler) postBatch(w http.ResponseWriter, r *http.Request) {
	if len(r.Header.Values(IdempotencyKeyHeader)) > 0 {
		// Silently ignoring it would leave the client believing the batch is
		// keyed.
		h.fail(w, r, &requestError{
			detail: "the " + IdempotencyKeyHeader + " header is not accepted on a batch: give each event its own idempotencyKey field (events[i].idempotencyKey)",
			field:  IdempotencyKeyHeader, reason: "is not accepted on POST /v1/events:batch; use events[i].idempotencyKey",
		}, "")
		return
	}
	body, ok := h.readBody(w, r)
	if !ok {
		return
	}
	if !h.decodeTurn(w, r) {
		return
	}
	inputs, batch, err := decodeBatch(h.writer, body, h.cfg.MaxBatch, h.decodeOptions(r))
	<-h.decodes
	if err != nil {
		h.fail(w, r, err, "")
		return
	}
	ctx, cancel := context.WithTimeout(r.Context(), h.cfg.RequestTimeout)
	defer cancel()
	res, err := h.write(ctx, batch)
	h.ingest.count(res, err)
	h.writes.record(err)
	if err != nil {
		err = namedFields(err, func(f outbox.FieldError) string { return itemField(f.Index, f.Field) })
		h.fail(w, r, err, "", zap.Int("events", len(inputs)))
		return
	}
	writeJSON(w, r, http.StatusOK, batchResponse{Results: res})
}

// decodeOptions are the decoding options of r.
func (h *handler) decodeOptions(r *http.Request) decodeOptions {
	return decodeOptions{client: clientOf(r), maxValues: h.cfg.MaxValues}
}

// decodeTurn waits for a place among the bodies decoded at once
// (Config.MaxDecodes), which the caller gives back; when the request ends
// first it answers and returns false.
func (h *handler) decodeTurn(w http.ResponseWriter, r *http.Request) bool {
	select {
	case h.decodes <- struct{}{}:
		return true
	case <-r.Context().Done():
		h.fail(w, r, r.Context().Err(), "")
		return false
	}
}

func (h *handler) getEvent(w http.ResponseWriter, r *http.Request) {
	id := r.PathValue("id")
	var ev *outbox.Event
	if outbox.IsEventID(id) {
		ctx, cancel := context.WithTimeout(r.Context(), h.cfg.RequestTimeout)
		defer cancel()
		got, err := h.cfg.Store.LoadEvents(ctx, []string{id})
		if err != nil {
			h.fail(w, r, err, "", zap.String("event_id", id))
			return
		}
		if l, ok := got[id]; ok {
			if l.Err != nil {
				h.fail(w, r, l.Err, "", zap.String("event_id", id))
				return
			}
			ev = l.Event
		}
	}
	if ev == nil {
		writeProblem(w, r, newProblem(http.StatusNotFound, "", "", "no event has this id"))
		return
	}
	writeJSON(w, r, http.StatusOK, operator.EventOf(ev))
}

// fail answers err: 400 for a malformed body, 413 for an event too large
// for the store, 422 for invalid fields or a reused idempotency key (named
// keyField, or events[i].idempotencyKey in a batch), 503 when the store is
// unreachable, the request ran out of time or the ingest committer is
// stopped, 500 otherwise. Only ids go to the log, never payloads.
func (h *handler) fail(w http.ResponseWriter, r *http.Request, err error, keyField string, ids ...zap.Field) {
	ids = append(ids, tracing.LogField(r.Context()))
	var (
		re *requestError
		ve *validationError
		me *outbox.MismatchError
	)
	switch {
	case errors.As(err, &re) && re.status == http.StatusRequestEntityTooLarge:
		writeProblem(w, r, newProblem(re.status, "", "", re.detail))
	case errors.As(err, &re):
		p := newProblem(http.StatusBadRequest, ProblemMalformed, "Malformed request", re.detail)
		if re.field != "" {
			p.Errors = []ProblemField{{Field: re.field, Reason: re.reason}}
		}
		writeProblem(w, r, p)
	case errors.As(err, &ve) && ve.status == http.StatusRequestEntityTooLarge:
		p := newProblem(ve.status, "", "", ve.Error())
		p.Errors = ve.Fields
		writeProblem(w, r, p)
	case errors.As(err, &ve):
		p := newProblem(http.StatusUnprocessableEntity, ProblemValidation, "Invalid fields", ve.Error())
		p.Errors = ve.Fields
		writeProblem(w, r, p)
	case errors.As(err, &me) && me.OtherIndex >= 0:
		p := newProblem(http.StatusUnprocessableEntity, ProblemMismatch, "Idempotency key reused",
			fmt.Sprintf("events[%d] and events[%d] carry the same idempotency key with different content", me.OtherIndex, me.Index))
		p.Errors = []ProblemField{{Field: itemField(me.Index, "idempotencyKey"),
			Reason: fmt.Sprintf("is also the key of events[%d], whose content differs", me.OtherIndex)}}
		writeProblem(w, r, p)
	case errors.As(err, &me):
		field := cmp.Or(keyField, itemField(me.Index, "idempotencyKey"))
		p := newProblem(http.StatusUnprocessableEntity, ProblemMismatch, "Idempotency key reused",
			"the idempotency key already names another event, whose content differs")
		p.Errors = []ProblemField{{Field: field, Reason: "was already used for an event with different content"}}
		writeProblem(w, r, p)
	case store.IsUnavailable(err), errors.Is(err, context.DeadlineExceeded) && r.Context().Err() == nil:
		h.logger.Warn("store unavailable", append(ids, zap.String("path", r.URL.Path), zap.Error(err))...)
		w.Header().Set("Retry-After", h.retryAfter)
		writeProblem(w, r, newProblem(http.StatusServiceUnavailable, ProblemUnavailable, "Store unavailable", "the store cannot take writes now; retry later"))
	case errors.Is(err, outbox.ErrCommitterStopped):
		// Shutting down: another instance, or this one restarted, takes it.
		h.logger.Warn("ingest stopped", append(ids, zap.String("path", r.URL.Path))...)
		w.Header().Set("Retry-After", h.retryAfter)
		writeProblem(w, r, newProblem(http.StatusServiceUnavailable, "", "", "this instance is shutting down; retry later"))
	case errors.Is(err, context.Canceled) && r.Context().Err() != nil:
		// The client went away; nobody reads this answer.
		h.logger.Debug("request cancelled", append(ids, zap.String("path", r.URL.Path))...)
		w.Header().Set("Retry-After", h.retryAfter)
		writeProblem(w, r, newProblem(http.StatusServiceUnavailable, "", "", "the request was cancelled"))
	default:
		h.logger.Error("request failed", append(ids, zap.String("path", r.URL.Path), zap.Error(err))...)
		writeProblem(w, r, newProblem(http.StatusInternalServerError, "", "", "the request could not be completed"))
	}
}
