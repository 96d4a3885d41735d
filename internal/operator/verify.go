package operator

import (
	"cmp"
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	"go.uber.org/zap"

	"github.com/outboxd/outboxd/internal/readmodel"
	"github.com/outboxd/outboxd/outbox"
	"github.com/outboxd/outboxd/store"
)

// VerifyQuery selects one chunk of a verify: compare the originals whose
// occurredAt lies in [From, To) with the read model.
type VerifyQuery struct {
	// From and To bound the window; a zero time leaves that side open.
	From, To time.Time
	// Repair re-publishes the synced originals that have no row (after
	// recomputing their days' statistics from the rows, or what another
	// read model derives from them (RecomputeReadModel), so the row
	// projected again is counted once) and recomputes drifted statistics
	// rows from their rows. Rows without an original are only reported.
	Repair bool
	// After continues with the chunk after this cursor (the Next of an
	// earlier result; "" from the start); Limit is the chunk's size, from 1
	// to ChunkMax. Defaults to ChunkDefault.
	After string
	Limit int
}

// The phases of a verify, in order.
const (
	PhaseOriginals = "originals" // synced originals without a row
	PhaseRows      = "rows"      // rows without an original
	PhaseStats     = "stats"     // statistics rows that differ from their rows
)

// The kinds of Drift.
const (
	DriftMissingRow = "missing_row"    // a synced original without a row
	DriftOrphanRow  = "orphan_row"     // a row without an original
	DriftStats      = "stats_mismatch" // a statistics row that differs from its rows
)

// Drift is one difference between the originals and the read model.
type Drift struct {
	Kind      string `json:"kind"`
	EventID   string `json:"eventId,omitempty"`
	SourceKey string `json:"sourceKey"`
	DeviceKey string `json:"deviceKey"`
	// OccurredAt is the event's (missing_row, orphan_row); Day the
	// statistics row's UTC day, YYYY-MM-DD (stats_mismatch).
	OccurredAt *time.Time `json:"occurredAt,omitempty"`
	Day        string     `json:"day,omitempty"`
	// Counted is the statistics row's count (0: no row), Rows the rows of
	// its day (stats_mismatch).
	Counted *int64 `json:"counted,omitempty"`
	Rows    *int64 `json:"rows,omitempty"`
	// Repaired is set when --repair re-published the original or
	// recomputed the statistics row.
	Repaired bool `json:"repaired"`
}

// VerifyResult is what Verify found in one chunk (POST /v1/admin/verify).
type VerifyResult struct {
	Phase string `json:"phase"`
	// Checked counts the originals listed or rows compared (in the stats
	// phase, the drifted statistics rows found).
	Checked int `json:"checked"`
	// Skipped counts the originals listed that the read model holds no
	// row of by design: of a type its projector does not key
	// (worker.TypeChecker), or routed to a stream whose workers do not
	// project into it (Config.ProjectedStreams). They are not compared.
	Skipped int `json:"skipped,omitempty"`
	// Total is, in the first chunk of the originals and the rows phase,
	// how many the whole phase will compare (for progress and its ETA).
	Total *int64  `json:"total,omitempty"`
	Drift []Drift `json:"drift"`
	// Republished originals and StatsRecomputed rows (repair): the demo
	// tables' statistics rows; for a read model that recomputes its own
	// derived rows (a projection file's -- recompute: statements), the
	// originals it recomputed them for.
	Republished     int `json:"republished"`
	StatsRecomputed int `json:"statsRecomputed"`
	// Expired counts the rows without an original that were created
	// before the event retention's horizon (Config.EventRetention): their
	// originals were deleted on purpose, so they are not drift.
	Expired int `json:"expired,omitempty"`
	// Next is the After of the next chunk; Done is set after the last.
	Next string `json:"next,omitempty"`
	Done bool   `json:"done"`
}

// verifyWindow is a checked VerifyQuery.
type verifyWindow struct {
	from, to *time.Time
	limit    int
	phase    string
	after    string // the phase's cursor
}

func (r VerifyQuery) window() (verifyWindow, error) {
	w := verifyWindow{limit: cmp.Or(r.Limit, ChunkDefault), phase: PhaseOriginals}
	if !r.From.IsZero() {
		t := r.From.UTC()
		w.from = &t
	}
	if !r.To.IsZero() {
		t := r.To.UTC()
		w.to = &t
	}
	if w.from != nil && w.to != nil && !w.from.Before(*w.to) {
		return w, Invalid("to", "must be after from")
	}
	if err := ValidateLimit(w.limit); err != nil {
		return w, err
	}
	if r.After != "" {
		phase, after, ok := strings.Cut(r.After, ":")
		if !ok || (phase != PhaseOriginals && phase != PhaseRows && phase != PhaseStats) {
			return w, Invalid("after", "is not a cursor of verify (pass the next of the previous answer)")
		}
		w.phase, w.after = phase, after
	}
	return w, nil
}

func (w verifyWindow) query() (store.EventQuery, error) {
	q := store.EventQuery{By: store.ByOccurred, State: outbox.StateSynced, Limit: w.limit}
	if w.from != nil {
		q.From = *w.from
	}
	if w.to != nil {
		q.To = *w.to
	}
	if w.after != "" {
		c, err := parseCursor(w.after)
		if err != nil {
			return q, err
		}
		q.After = c
	}
	return q, nil
}

// Verify compares one chunk of the originals with the read model. The
// phases run in order, each in chunks: synced originals without a row
// (originals), rows without an original (rows), then the statistics rows
// of the window's days that differ from their rows (stats, one chunk of at
// most Limit drifted rows). With Repair the first and the last are
// repaired.
func (o *Operator) Verify(ctx context.Context, r VerifyQuery) (*VerifyResult, error) {
	w, err := r.window()
	if err != nil {
		return nil, err
	}
	if err := o.needReadModel(); err != nil {
		return nil, err
	}
	if r.Repair {
		if err := o.needRedis(); err != nil {
			return nil, err
		}
	}
	res := &VerifyResult{Phase: w.phase, Drift: []Drift{}}
	switch w.phase {
	case PhaseOriginals:
		err = o.verifyOriginals(ctx, w, r.Repair, res)
	case PhaseRows:
		err = o.verifyRows(ctx, w, res)
	default:
		err = o.verifyStats(ctx, w, r.Repair, res)
	}
	if err != nil {
		return nil, err
	}
	if len(res.Drift) > 0 {
		o.logger.Info("verify found drift", zap.String("phase", res.Phase), zap.Int("drift", len(res.Drift)),
			zap.Int("republished", res.Republished), zap.Int("stats_recomputed", res.StatsRecomputed))
	}
	return res, nil
}

func (o *Operator) verifyOriginals(ctx context.Context, w verifyWindow, repair bool, res *VerifyResult) error {
	q, err := w.query()
	if err != nil {
		return err
	}
	page, err := o.cfg.Store.ListEvents(ctx, q)
	if err != nil {
		return storeErr("listing synced originals", err)
	}
	res.Checked = len(page)
	if w.after == "" {
		n, err := o.cfg.Store.CountEvents(ctx, q)
		if err != nil {
			return storeErr("counting synced originals", err)
		}
		res.Total = &n
	}
	if len(page) == q.Limit {
		res.Next = PhaseOriginals + ":" + formatCursor(q.CursorOf(page[len(page)-1]))
	} else {
		res.Next = PhaseRows + ":"
	}
	held := o.scope.filter(page)
	res.Skipped = len(page) - len(held)
	if len(held) == 0 {
		return nil
	}
	found, err := o.cfg.ReadModel.Projected(ctx, eventIDs(held))
	if err != nil {
		return pgErr("reading rows", err)
	}
	var missing []*outbox.Event
	var keys []readmodel.StatsKey
	for _, ev := range held {
		if found[ev.ID] {
			continue
		}
		missing = append(missing, ev)
		keys = append(keys, readmodel.KeyOf(ev))
	}
	var ok []bool
	if repair && len(missing) > 0 {
		// Statistics first: a row deleted by hand left its count behind,
		// and the row projected again must be counted once.
		switch rm := o.cfg.ReadModel.(type) {
		case StatsReadModel:
			if err := rm.RecomputeStats(ctx, keys); err != nil {
				return pgErr("recomputing statistics", err)
			}
			slices.SortFunc(keys, readmodel.StatsKey.Compare)
			res.StatsRecomputed = len(slices.Compact(keys))
		case RecomputeReadModel:
			full, err := o.withPayloads(ctx, missing)
			if err != nil {
				return err
			}
			if res.StatsRecomputed, err = rm.Recompute(ctx, full); err != nil {
				return pgErr("recomputing derived rows", err)
			}
		}
		if ok, err = o.publish(ctx, missing, outbox.OriginReplay); err != nil {
			return err
		}
	}
	for i, ev := range missing {
		at := ev.OccurredAt
		d := Drift{Kind: DriftMissingRow, EventID: ev.ID, SourceKey: ev.SourceKey, DeviceKey: ev.DeviceKey, OccurredAt: &at}
		if ok != nil && ok[i] {
			d.Repaired = true
			res.Republished++
		}
		res.Drift = append(res.Drift, d)
	}
	return nil
}

func (o *Operator) verifyRows(ctx context.Context, w verifyWindow, res *VerifyResult) error {
	rm, ok := o.cfg.ReadModel.(RowReadModel)
	if !ok { // a read model that cannot list its rows: nothing to compare
		res.Next = PhaseStats + ":"
		return nil
	}
	rows, err := rm.Rows(ctx, w.from, w.to, w.after, w.limit)
	if err != nil {
		return pgErr("reading rows", err)
	}
	res.Checked = len(rows)
	if w.after == "" {
		n, err := rm.CountRows(ctx, w.from, w.to)
		if err != nil {
			return pgErr("counting rows", err)
		}
		res.Total = &n
	}
	if len(rows) == w.limit {
		res.Next = PhaseRows + ":" + rows[len(rows)-1].EventID
	} else {
		res.Next = PhaseStats + ":"
	}
	ids := rowIDs(rows)
	loaded, err := o.cfg.Store.LoadEvents(ctx, ids)
	if err != nil {
		return storeErr(fmt.Sprintf("reading the originals of %d rows", len(ids)), err)
	}
	var horizon time.Time
	if o.cfg.EventRetention > 0 {
		horizon = o.cfg.Now().Add(-o.cfg.EventRetention)
	}
	for _, row := range rows {
		if _, ok := loaded[row.EventID]; !ok {
			if row.CreatedAt.Before(horizon) {
				res.Expired++
				continue
			}
			at := row.OccurredAt
			res.Drift = append(res.Drift, Drift{Kind: DriftOrphanRow, EventID: row.EventID, SourceKey: row.SourceKey,
				DeviceKey: row.DeviceKey, OccurredAt: &at})
		}
	}
	return nil
}

func (o *Operator) verifyStats(ctx context.Context, w verifyWindow, repair bool, res *VerifyResult) error {
	rm, ok := o.cfg.ReadModel.(StatsReadModel)
	if !ok { // a read model without derived rows it can compare
		res.Done = true
		return nil
	}
	drift, err := rm.StatsDrift(ctx, w.from, w.to, w.limit)
	if err != nil {
		return pgErr("comparing statistics with rows", err)
	}
	res.Checked, res.Done = len(drift), true
	keys := make([]readmodel.StatsKey, len(drift))
	for i, d := range drift {
		keys[i] = d.StatsKey
	}
	if repair && len(keys) > 0 {
		if err := rm.RecomputeStats(ctx, keys); err != nil {
			return pgErr("recomputing statistics", err)
		}
		res.StatsRecomputed = len(keys)
	}
	for _, d := range drift {
		counted, rows := d.Counted, d.Rows
		res.Drift = append(res.Drift, Drift{Kind: DriftStats, SourceKey: d.SourceKey, DeviceKey: d.DeviceKey,
			Day: d.Day.Format(time.DateOnly), Counted: &counted, Rows: &rows, Repaired: repair})
	}
	return nil
}

// withPayloads returns events (as ListEvents gives them: without their
// payloads) loaded whole from the store, in their order; one the store no
// longer has or cannot decode stays as it was.
func (o *Operator) withPayloads(ctx context.Context, events []*outbox.Event) ([]*outbox.Event, error) {
	loaded, err := o.cfg.Store.LoadEvents(ctx, eventIDs(events))
	if err != nil {
		return nil, storeErr(fmt.Sprintf("reading %d originals", len(events)), err)
	}
	out := make([]*outbox.Event, len(events))
	for i, ev := range events {
		out[i] = ev
		if l, ok := loaded[ev.ID]; ok && l.Err == nil && l.Event != nil {
			out[i] = l.Event
		}
	}
	return out, nil
}

// eventIDs returns the ids of events, in their order.
func eventIDs(events []*outbox.Event) []string {
	ids := make([]string, len(events))
	for i, ev := range events {
		ids[i] = ev.ID
	}
	return ids
}

// rowIDs returns the event ids of rows, in their order.
func rowIDs(rows []readmodel.Row) []string {
	ids := make([]string, len(rows))
	for i, r := range rows {
		ids[i] = r.EventID
	}
	return ids
}
