package httpapi

import (
	"cmp"
	"context"
	"fmt"
	"strconv"
	"strings"
	"time"

	"go.uber.org/zap"

	"github.com/outboxd/outboxd/outbox"
	"github.com/outboxd/outboxd/store"
)

// ReplayRequest is the body of POST /v1/admin/replay: the originals of a
// window [From, To) of occurredAt (By "occurred", the default) or
// createdAt (By "created"), of one source or device, in one state
// (pending, failed, synced or any, the default).
type ReplayRequest struct {
	From      string `json:"from"`
	To        string `json:"to"`
	By        string `json:"by,omitempty"`
	SourceKey string `json:"sourceKey,omitempty"`
	DeviceKey string `json:"deviceKey,omitempty"`
	State     string `json:"state,omitempty"`
	// DryRun counts the window's originals and changes nothing.
	DryRun bool `json:"dryRun,omitempty"`
	// Rebuild removes the chunk's rows from the read model, with their
	// counts, before re-publishing it (after a projection bug is fixed).
	Rebuild bool `json:"rebuild,omitempty"`
	// After continues with the chunk after this cursor (a Next of an
	// earlier answer); Limit is the chunk's size (AdminChunkDefault).
	After string `json:"after,omitempty"`
	Limit int    `json:"limit,omitempty"`
}

// ReplayResult is the answer of POST /v1/admin/replay.
type ReplayResult struct {
	DryRun bool `json:"dryRun"`
	// Count is the number of originals in the window (dry run only).
	Count *int64 `json:"count,omitempty"`
	// Matched originals of this chunk, Published to the stream with origin
	// replay, Redriven of them were parked (failed), RemovedRows from the
	// read model (rebuild).
	Matched     int   `json:"matched"`
	Published   int   `json:"published"`
	Redriven    int64 `json:"redriven"`
	RemovedRows int64 `json:"removedRows"`
	// Next is the After of the next chunk; Done is set after the last.
	Next string `json:"next,omitempty"`
	Done bool   `json:"done"`
}

// parseTime reads an RFC 3339 time of field.
func parseTime(v, field string) (time.Time, error) {
	t, err := time.Parse(time.RFC3339Nano, v)
	if err != nil {
		return time.Time{}, invalid(field, "must be an RFC 3339 time (2026-11-29T09:00:00Z), got %q", v)
	}
	return t.UTC(), nil
}

// query checks r and returns its store query.
func (r ReplayRequest) query() (store.EventQuery, error) {
	var q store.EventQuery
	if r.From == "" {
		return q, invalid("from", "is required: the window is [from, to)")
	}
	if r.To == "" {
		return q, invalid("to", "is required: the window is [from, to)")
	}
	from, err := parseTime(r.From, "from")
	if err != nil {
		return q, err
	}
	to, err := parseTime(r.To, "to")
	if err != nil {
		return q, err
	}
	if !from.Before(to) {
		return q, invalid("to", "must be after from")
	}
	q = store.EventQuery{By: store.TimeField(cmp.Or(r.By, string(store.ByOccurred))), From: from, To: to,
		SourceKey: r.SourceKey, DeviceKey: r.DeviceKey, State: cmp.Or(r.State, store.StateAny)}
	switch {
	case q.By != store.ByOccurred && q.By != store.ByCreated:
		return q, invalid("by", "must be occurred or created")
	case q.State != store.StateAny && q.State != outbox.StatePending && q.State != outbox.StateFailed && q.State != outbox.StateSynced:
		return q, invalid("state", "must be pending, failed, synced or any")
	case q.DeviceKey != "" && q.SourceKey == "":
		return q, invalid("sourceKey", "is required with deviceKey: a device is named within its source")
	}
	q.Limit = cmp.Or(r.Limit, AdminChunkDefault)
	if q.Limit < 1 || q.Limit > AdminChunkMax {
		return q, invalid("limit", "must be from 1 to %d", AdminChunkMax)
	}
	if r.After != "" {
		c, err := parseCursor(r.After)
		if err != nil {
			return q, err
		}
		q.After = c
	}
	return q, nil
}

// formatCursor encodes a listing cursor: "<unix ms>_<id>".
func formatCursor(c *store.EventCursor) string {
	return strconv.FormatInt(c.At.UnixMilli(), 10) + "_" + c.ID
}

func parseCursor(s string) (*store.EventCursor, error) {
	ms, id, ok := strings.Cut(s, "_")
	n, err := strconv.ParseInt(ms, 10, 64)
	if !ok || err != nil || !outbox.IsEventID(id) {
		return nil, invalid("after", "is not a cursor of this listing (pass the next of the previous answer)")
	}
	return &store.EventCursor{At: time.UnixMilli(n).UTC(), ID: id}, nil
}

// Replay re-publishes one chunk of the originals of a window with origin
// replay and their own idempotency keys, so the worker's idempotent
// projection recomputes nothing twice. Parked originals of the chunk are
// re-driven first (store.Store.Redrive). With Rebuild, the chunk's rows
// are removed from the read model and their counts taken out of the
// statistics in one PostgreSQL transaction before the publish, so the
// normal path computes them again; should the publish then fail, the rows
// stay missing (verify reports them) until the same replay runs again.
// A dry run counts the window and changes nothing.
func (a *Admin) Replay(ctx context.Context, r ReplayRequest) (*ReplayResult, error) {
	q, err := r.query()
	if err != nil {
		return nil, err
	}
	if r.DryRun {
		n, err := a.cfg.Store.CountEvents(ctx, q)
		if err != nil {
			return nil, fmt.Errorf("error counting the window's originals: %w", err)
		}
		return &ReplayResult{DryRun: true, Count: &n, Done: true}, nil
	}
	if err := a.needRedis(); err != nil {
		return nil, err
	}
	if r.Rebuild {
		if err := a.needPostgres(); err != nil {
			return nil, err
		}
	}
	page, err := a.cfg.Store.ListEvents(ctx, q)
	if err != nil {
		return nil, fmt.Errorf("error listing the window's originals: %w", err)
	}
	res := &ReplayResult{Matched: len(page), Done: len(page) < q.Limit}
	if len(page) > 0 && !res.Done {
		res.Next = formatCursor(q.CursorOf(page[len(page)-1]))
	}
	ids := make([]string, len(page))
	var parked []string
	for i, ev := range page {
		ids[i] = ev.ID
		if ev.State() == outbox.StateFailed {
			parked = append(parked, ev.ID)
		}
	}
	if r.Rebuild && len(ids) > 0 {
		var err error
		if res.RemovedRows, err = a.cfg.ReadModel.Unproject(ctx, ids); err != nil {
			return nil, pgErr(fmt.Sprintf("removing the rows of %d originals", len(ids)), err)
		}
	}
	if len(parked) > 0 {
		if res.Redriven, err = a.cfg.Store.Redrive(ctx, parked); err != nil {
			return nil, fmt.Errorf("error clearing the syncFailure of %d originals: %w", len(parked), err)
		}
	}
	ok, err := a.publish(ctx, page, outbox.OriginReplay)
	for _, o := range ok {
		if o {
			res.Published++
		}
	}
	a.logger.Info("replayed a chunk", zap.Int("matched", res.Matched), zap.Int("published", res.Published),
		zap.Int64("redriven", res.Redriven), zap.Int64("removed_rows", res.RemovedRows), zap.Bool("rebuild", r.Rebuild))
	if err != nil {
		return nil, err
	}
	return res, nil
}

// EventSummary is an original without its payload (GET /v1/events/{id}
// has it).
type EventSummary struct {
	ID             string              `json:"id"`
	IdempotencyKey string              `json:"idempotencyKey"`
	SourceKey      string              `json:"sourceKey"`
	DeviceKey      string              `json:"deviceKey"`
	Type           string              `json:"type"`
	OccurredAt     time.Time           `json:"occurredAt"`
	CreatedAt      time.Time           `json:"createdAt"`
	State          string              `json:"state"`
	SyncedAt       *time.Time          `json:"syncedAt"`
	LastRequeuedAt *time.Time          `json:"lastRequeuedAt"`
	RequeueCount   int64               `json:"requeueCount"`
	SyncFailure    *outbox.SyncFailure `json:"syncFailure"`
}

// EventsPage is the answer of GET /v1/admin/events: originals in (time,
// id) order.
type EventsPage struct {
	Events []EventSummary `json:"events"`
	// Next, when set, is the after of the next page.
	Next string `json:"next,omitempty"`
}

// ListEvents lists the originals of a window, of one source or device, in
// one state, as replay would select them: to see what a replay would touch,
// or which originals are parked. r.From and r.To are optional here.
func (a *Admin) ListEvents(ctx context.Context, r ReplayRequest) (*EventsPage, error) {
	open := r
	if open.From == "" {
		open.From = time.Unix(0, 0).UTC().Format(time.RFC3339)
	}
	if open.To == "" {
		open.To = "9999-12-31T23:59:59Z"
	}
	q, err := open.query()
	if err != nil {
		return nil, err
	}
	page, err := a.cfg.Store.ListEvents(ctx, q)
	if err != nil {
		return nil, fmt.Errorf("error listing originals: %w", err)
	}
	out := &EventsPage{Events: make([]EventSummary, len(page))}
	for i, ev := range page {
		out.Events[i] = summaryOf(ev)
	}
	if len(page) == q.Limit {
		out.Next = formatCursor(q.CursorOf(page[len(page)-1]))
	}
	return out, nil
}
