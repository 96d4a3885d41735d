package operator

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"go.uber.org/zap"

	"github.com/outboxd/outboxd/outbox"
	"github.com/outboxd/outboxd/store"
)

// EventsQuery selects originals by boundary, as a replay does and in the
// store.EventQuery style: a window [From, To) of occurredAt (By
// store.ByOccurred, the default) or createdAt (store.ByCreated), of one
// source or one device of a source, in one state (outbox.StatePending,
// StateFailed, StateSynced, or store.StateAny, the default), one chunk at
// a time.
type EventsQuery struct {
	By store.TimeField
	// From and To bound the window; a zero time leaves that side open
	// (ListEvents; a replay needs both).
	From, To             time.Time
	SourceKey, DeviceKey string
	State                string
	// After continues with the chunk after this cursor (the Next of an
	// earlier result; "" from the window's start); Limit is the chunk's
	// size, from 1 to ChunkMax. Defaults to ChunkDefault.
	After string
	Limit int
}

// ReplayQuery selects one chunk of a replay: its window is required.
type ReplayQuery struct {
	EventsQuery
	// DryRun counts the window's originals and changes nothing.
	DryRun bool
	// Rebuild removes the chunk's rows from the read model, with their
	// counts, before re-publishing it (after a projection bug is fixed).
	Rebuild bool
	// Entities replays the window of each of these entities in turn, each
	// "sourceKey" or "sourceKey/deviceKey", in place of SourceKey and
	// DeviceKey; After then carries the entity's place.
	Entities []string
	// EntityRanges replays the window of each of these ranges of devices
	// in turn, after Entities: Entities and EntityRanges name at most
	// 1,000 in all. An entity named twice (a device and a range holding
	// it) is replayed, and counted, twice; the worker absorbs the copies.
	EntityRanges []EntityRange
	// Type keeps the originals of this type only.
	Type string
	// Started is when the replay began: the Started of its first chunk's
	// result (zero for the first chunk: now). A chunk of a replay that
	// began before the last CancelReplay is refused with ErrCancelled.
	Started time.Time

	// deviceFrom and deviceTo are the range of devices of SourceKey one
	// call of replayEntities replays (store.EventQuery.DeviceFrom).
	deviceFrom, deviceTo string
}

// EntityRange is a range of the devices of one source: those whose
// deviceKey lies between From and To, both included, in byte order of
// the keys (store.EventQuery.DeviceFrom): "dev-001".."dev-099" holds
// "dev-05" but not "dev-1". The command line writes it
// SOURCE/FROM..TO (ParseEntityRange).
type EntityRange struct {
	SourceKey string `json:"sourceKey"`
	From      string `json:"from"`
	To        string `json:"to"`
}

// String returns r as the command line writes it: SOURCE/FROM..TO.
func (r EntityRange) String() string { return r.SourceKey + "/" + r.From + ".." + r.To }

// check returns why r selects nothing well defined ("" when it does),
// to follow the name of its field or flag.
func (r EntityRange) check() string {
	switch {
	case r.SourceKey == "":
		return fmt.Sprintf("needs the source: SOURCE/FROM..TO (got %q)", r.String())
	case r.From == "" || r.To == "":
		return fmt.Sprintf("needs both bounds, FROM and TO (got %q)", r.String())
	case r.From > r.To:
		return fmt.Sprintf("has FROM %q after TO %q in byte order: the range is [FROM, TO] (got %q)", r.From, r.To, r.String())
	}
	return ""
}

// ParseEntityRange reads a range of devices written SOURCE/FROM..TO: the
// source up to the first "/", then the bounds on either side of "..",
// which must occur once (a deviceKey holding ".." is a bound only through
// the admin API's entityRanges). It returns an error wrapping ErrInvalid,
// of field entityRanges, for a range without a source, an empty bound or
// FROM after TO; EntityRangeReason says why.
func ParseEntityRange(s string) (EntityRange, error) {
	source, bounds, ok := strings.Cut(s, "/")
	if !ok {
		return EntityRange{}, Invalid("entityRanges", "needs the source: SOURCE/FROM..TO (got %q)", s)
	}
	if strings.Count(bounds, "..") != 1 {
		return EntityRange{}, Invalid("entityRanges", "is SOURCE/FROM..TO, with \"..\" once between the bounds (got %q)", s)
	}
	from, to, _ := strings.Cut(bounds, "..")
	r := EntityRange{SourceKey: source, From: from, To: to}
	if why := r.check(); why != "" {
		return EntityRange{}, Invalid("entityRanges", "%s", why)
	}
	return r, nil
}

// EntityRangeReason returns why ParseEntityRange refused its input (its
// error's reason, without the field), or err's text for another error.
func EntityRangeReason(err error) string {
	var oe *Error
	if errors.As(err, &oe) && len(oe.Fields) == 1 {
		return oe.Fields[0].Reason
	}
	return err.Error()
}

// ReplayResult is what Replay did to one chunk (POST /v1/admin/replay).
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
	// Started is when the replay began, to pass with its next chunk
	// (ReplayQuery.Started), so that a cancel stops it.
	Started *time.Time `json:"started,omitempty"`
}

// store checks q and returns its store query.
func (q EventsQuery) store() (store.EventQuery, error) {
	sq := store.EventQuery{By: cmp.Or(q.By, store.ByOccurred), From: q.From.UTC(), To: q.To.UTC(),
		SourceKey: q.SourceKey, DeviceKey: q.DeviceKey, State: cmp.Or(q.State, store.StateAny), Limit: cmp.Or(q.Limit, ChunkDefault)}
	if q.From.IsZero() {
		sq.From = time.Time{}
	}
	if q.To.IsZero() {
		sq.To = time.Time{}
	}
	switch {
	case !sq.From.IsZero() && !sq.To.IsZero() && !sq.From.Before(sq.To):
		return sq, Invalid("to", "must be after from")
	case sq.By != store.ByOccurred && sq.By != store.ByCreated:
		return sq, Invalid("by", "must be occurred or created")
	case sq.State != store.StateAny && sq.State != outbox.StatePending && sq.State != outbox.StateFailed && sq.State != outbox.StateSynced:
		return sq, Invalid("state", "must be pending, failed, synced or any")
	case sq.DeviceKey != "" && sq.SourceKey == "":
		return sq, Invalid("sourceKey", "is required with deviceKey: a device is named within its source")
	}
	if err := ValidateLimit(sq.Limit); err != nil {
		return sq, err
	}
	if q.After != "" {
		c, err := parseCursor(q.After)
		if err != nil {
			return sq, err
		}
		sq.After = c
	}
	return sq, nil
}

// store checks q, whose window is required, and returns its store query.
func (q ReplayQuery) store() (store.EventQuery, error) {
	switch {
	case q.From.IsZero():
		return store.EventQuery{}, Invalid("from", "is required: the window is [from, to)")
	case q.To.IsZero():
		return store.EventQuery{}, Invalid("to", "is required: the window is [from, to)")
	}
	sq, err := q.EventsQuery.store()
	sq.DeviceFrom, sq.DeviceTo = q.deviceFrom, q.deviceTo
	return sq, err
}

// formatCursor encodes a listing cursor: "<unix ms>_<id>".
func formatCursor(c *store.EventCursor) string {
	return strconv.FormatInt(c.At.UnixMilli(), 10) + "_" + c.ID
}

func parseCursor(s string) (*store.EventCursor, error) {
	ms, id, ok := strings.Cut(s, "_")
	n, err := strconv.ParseInt(ms, 10, 64)
	if !ok || err != nil || !outbox.IsEventID(id) {
		return nil, Invalid("after", "is not a cursor of this listing (pass the next of the previous answer)")
	}
	return &store.EventCursor{At: time.UnixMilli(n).UTC(), ID: id}, nil
}

// Replay re-publishes one chunk of the originals of a window with origin
// replay and their own idempotency keys, so the worker's idempotent
// projection recomputes nothing twice. Parked originals of the chunk are
// redriven first (store.Store.Redrive). With Rebuild, the chunk's rows
// are removed from the read model and their counts taken out of the
// statistics in one PostgreSQL transaction before the publish, so the
// normal path computes them again; should the publish then fail, the rows
// stay missing (verify reports them) until the same replay runs again.
// A dry run counts the window and changes nothing.
//
// The last chunk of a replay (Done, not a dry run) observes the replay's
// duration, from its first chunk (Started) to now, in
// outboxd_replay_duration_seconds.
func (o *Operator) Replay(ctx context.Context, r ReplayQuery) (*ReplayResult, error) {
	var res *ReplayResult
	var err error
	if len(r.Entities) > 0 || len(r.EntityRanges) > 0 {
		res, err = o.replayEntities(ctx, r)
	} else {
		res, err = o.replayWindow(ctx, r)
	}
	if err == nil && res.Done && !res.DryRun && res.Started != nil {
		o.replayDuration.Observe(max(0, o.cfg.Now().Sub(*res.Started).Seconds()))
	}
	return res, err
}

// replayWindow is Replay of one chunk of a window without Entities.
func (o *Operator) replayWindow(ctx context.Context, r ReplayQuery) (*ReplayResult, error) {
	q, err := r.store()
	if err != nil {
		return nil, err
	}
	if r.DryRun {
		n, err := o.countWindow(ctx, q, r.Type)
		if err != nil {
			return nil, storeErr("counting the window's originals", err)
		}
		return &ReplayResult{DryRun: true, Count: &n, Done: true}, nil
	}
	if err := o.needRedis(); err != nil {
		return nil, err
	}
	var unproject UnprojectReadModel
	if r.Rebuild {
		if err := o.needReadModel(); err != nil {
			return nil, err
		}
		var ok bool
		unproject, ok = o.cfg.ReadModel.(UnprojectReadModel)
		if c, asks := o.cfg.ReadModel.(interface{ CanUnproject() bool }); ok && asks {
			ok = c.CanUnproject()
		}
		if !ok {
			return nil, &Error{Kind: ErrNotAvailable, Backend: BackendPostgres,
				Detail: "this read model's projector cannot remove rows, so --rebuild is not available (replay without it)"}
		}
	}
	started := r.Started.UTC()
	if started.IsZero() {
		started = o.cfg.Now().UTC()
	}
	cancelled, err := store.LastReplayCancel(ctx, o.cfg.Store, o.cfg.Stream)
	if err != nil {
		return nil, storeErr("reading the last cancel of the replays", err)
	}
	if cancelled != nil && !cancelled.Before(started) {
		return nil, &Error{Kind: ErrCancelled, Detail: fmt.Sprintf(
			"this replay (started %s) was cancelled at %s: nothing more of it is published; start a new replay to replay again",
			started.Format(time.RFC3339Nano), cancelled.UTC().Format(time.RFC3339Nano))}
	}
	page, err := o.cfg.Store.ListEvents(ctx, q)
	if err != nil {
		return nil, storeErr("listing the window's originals", err)
	}
	res := &ReplayResult{Done: len(page) < q.Limit, Started: &started}
	if len(page) > 0 && !res.Done {
		res.Next = formatCursor(q.CursorOf(page[len(page)-1]))
	}
	page = ofType(page, r.Type)
	res.Matched = len(page)
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
		if res.RemovedRows, err = unproject.Unproject(ctx, ids); err != nil {
			return nil, pgErr(fmt.Sprintf("removing the rows of %d originals", len(ids)), err)
		}
	}
	if len(parked) > 0 {
		if res.Redriven, err = o.cfg.Store.Redrive(ctx, parked); err != nil {
			return nil, storeErr(fmt.Sprintf("clearing the syncFailure of %d originals", len(parked)), err)
		}
	}
	ok, err := o.publish(ctx, page, outbox.OriginReplay)
	for _, added := range ok {
		if added {
			res.Published++
		}
	}
	o.logger.Info("replayed a chunk", zap.Int("matched", res.Matched), zap.Int("published", res.Published),
		zap.Int64("redriven", res.Redriven), zap.Int64("removed_rows", res.RemovedRows), zap.Bool("rebuild", r.Rebuild))
	if err != nil {
		return nil, err
	}
	return res, nil
}

// EventSummary is an original without its payload (Event has it), with
// the reconciler's stamp: an item of ListEvents.
type EventSummary struct {
	ID             string `json:"id"`
	IdempotencyKey string `json:"idempotencyKey"`
	// Client is the ingest client that sent the original (absent: the
	// default client).
	Client         string              `json:"client,omitempty"`
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

// EventsPage is what ListEvents returns (GET /v1/admin/events): originals
// in (time, id) order.
type EventsPage struct {
	Events []EventSummary `json:"events"`
	// Next, when set, is the after of the next page.
	Next string `json:"next,omitempty"`
}

// ListEvents lists one page of the originals of a window, of one source or
// device, in one state, as a replay would select them: to see what a replay
// would touch, or which originals are parked. The window may be open on
// either side here.
func (o *Operator) ListEvents(ctx context.Context, r EventsQuery) (*EventsPage, error) {
	q, err := r.store()
	if err != nil {
		return nil, err
	}
	page, err := o.cfg.Store.ListEvents(ctx, q)
	if err != nil {
		return nil, storeErr("listing originals", err)
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

// entitiesMax bounds ReplayQuery.Entities and EntityRanges together.
const entitiesMax = 1000

// entityRef is one entity of a replay: a source, a device of it, or a
// range of its devices.
type entityRef struct{ source, device, from, to string }

// replayEntities is Replay of each of r.Entities, then of each of
// r.EntityRanges, in turn: one chunk of one entity per call, r.After
// "<place>~<cursor>" naming the entity and the chunk after which to go
// on; a dry run counts them all. Every entity is checked before anything
// is counted or published.
func (o *Operator) replayEntities(ctx context.Context, r ReplayQuery) (*ReplayResult, error) {
	field := "entities"
	if len(r.Entities) == 0 {
		field = "entityRanges"
	}
	switch {
	case r.SourceKey != "" || r.DeviceKey != "":
		return nil, Invalid(field, "cannot be combined with sourceKey or deviceKey")
	case len(r.Entities)+len(r.EntityRanges) > entitiesMax:
		return nil, Invalid(field, "at most %d entities and ranges per replay", entitiesMax)
	}
	refs := make([]entityRef, 0, len(r.Entities)+len(r.EntityRanges))
	for _, e := range r.Entities {
		source, device, _ := strings.Cut(e, "/")
		if source == "" || strings.HasSuffix(e, "/") {
			return nil, Invalid("entities", "each is sourceKey or sourceKey/deviceKey (got %q)", e)
		}
		refs = append(refs, entityRef{source: source, device: device})
	}
	for _, e := range r.EntityRanges {
		if why := e.check(); why != "" {
			return nil, Invalid("entityRanges", "%s", why)
		}
		refs = append(refs, entityRef{source: e.SourceKey, from: e.From, to: e.To})
	}
	place, after := 0, ""
	if r.After != "" {
		p, cursor, ok := strings.Cut(r.After, "~")
		n, err := strconv.Atoi(p)
		if !ok || err != nil || n < 0 || n >= len(refs) {
			return nil, Invalid("after", "is not a cursor of this replay (pass the next of the previous answer)")
		}
		place, after = n, cursor
	}
	one := func(i int, after string) (*ReplayResult, error) {
		q := r
		q.Entities, q.EntityRanges, q.After = nil, nil, after
		q.SourceKey, q.DeviceKey, q.deviceFrom, q.deviceTo = refs[i].source, refs[i].device, refs[i].from, refs[i].to
		return o.replayWindow(ctx, q)
	}
	if r.DryRun {
		var total int64
		for i := range refs {
			res, err := one(i, "")
			if err != nil {
				return nil, err
			}
			total += *res.Count
		}
		return &ReplayResult{DryRun: true, Count: &total, Done: true}, nil
	}
	res, err := one(place, after)
	if err != nil {
		return nil, err
	}
	switch {
	case !res.Done:
		res.Next = strconv.Itoa(place) + "~" + res.Next
	case place+1 < len(refs):
		res.Done, res.Next = false, strconv.Itoa(place+1)+"~"
	}
	return res, nil
}

// ofType keeps the events of type t ("" keeps all).
func ofType(events []*outbox.Event, t string) []*outbox.Event {
	if t == "" {
		return events
	}
	out := events[:0:0]
	for _, ev := range events {
		if ev.Type == t {
			out = append(out, ev)
		}
	}
	return out
}

// countWindow counts the originals q selects, of type t when set: the
// store counts a window, but a type it pages through.
func (o *Operator) countWindow(ctx context.Context, q store.EventQuery, t string) (int64, error) {
	if t == "" {
		return o.cfg.Store.CountEvents(ctx, q)
	}
	q.Limit = ChunkMax
	var n int64
	for {
		page, err := o.cfg.Store.ListEvents(ctx, q)
		if err != nil {
			return 0, err
		}
		n += int64(len(ofType(page, t)))
		if len(page) < q.Limit {
			return n, nil
		}
		q.After = q.CursorOf(page[len(page)-1])
	}
}
