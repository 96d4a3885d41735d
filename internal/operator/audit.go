package operator

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap"

	"github.com/outboxd/outboxd/internal/bounds"
	ometrics "github.com/outboxd/outboxd/internal/metrics"
	"github.com/outboxd/outboxd/internal/readmodel"
	"github.com/outboxd/outboxd/internal/startstop"
	"github.com/outboxd/outboxd/outbox"
	"github.com/outboxd/outboxd/store"
)

// Defaults and limits of AuditConfig.
const (
	// AuditEveryDefault is how often the audit runs (--audit-every).
	AuditEveryDefault = time.Minute
	// AuditEveryShortest is the shortest accepted AuditConfig.Every: each
	// run reads a sample of the store and the read model, which should not
	// be read more often than once a second.
	AuditEveryShortest = time.Second
	// AuditSampleDefault is the most synced originals one run compares
	// (--audit-sample).
	AuditSampleDefault = 1000
	// AuditSampleMax is the largest --audit-sample.
	AuditSampleMax = 100_000
	// auditChunk is the most ids or statistics keys one query of a run
	// names; auditDayRows the most rows of the sampled days one query
	// reads.
	auditChunk   = 1000
	auditDayRows = 10 * auditChunk
	// auditFindingsKept is how many findings a report names (the counts
	// cover them all).
	auditFindingsKept = 10
	// auditWalkQueries bounds the listing queries of one walk.
	auditWalkQueries = 64
	// auditMinSpan is the narrowest window of createdAt a walk lists: the
	// stores keep times to the millisecond.
	auditMinSpan = time.Millisecond
	// auditMaxSpan is the widest.
	auditMaxSpan = 366 * 24 * time.Hour
)

// The kinds of drift the audit finds: the label kind of
// outboxd_audit_drift_total.
const (
	// AuditMissing: a synced original without its row.
	AuditMissing = "missing"
	// AuditExtra: a row of a sampled day whose original does not exist
	// (and was not removed by the event retention).
	AuditExtra = "extra"
	// AuditContent: a row whose keys, type or times differ from its
	// original's.
	AuditContent = "content"
	// AuditStats: a statistics row of a sampled day that differs from its
	// rows (count, first or last occurrence).
	AuditStats = "stats"
)

// AuditKinds are the kinds of drift, in the order reports list them.
var AuditKinds = []string{AuditMissing, AuditExtra, AuditContent, AuditStats}

// AuditReadModel is what the audit needs of any read model: which of a
// sample's originals it holds, and the record of its last run
// (readmodel.DB, readmodel.Keyed). A read model that is also an
// AuditContents is compared more closely.
type AuditReadModel interface {
	Projected(ctx context.Context, ids []string) (map[string]bool, error)
	SaveAudit(ctx context.Context, stream string, ranAt time.Time, report []byte) error
	LastAudit(ctx context.Context, stream string) ([]byte, error)
}

// AuditContents is readmodel.DB's bounded lookups of a sample: its rows
// (compared field by field with their originals), the rows of its days
// (looked up in the store) and their statistics.
type AuditContents interface {
	RowsByID(ctx context.Context, ids []string) ([]readmodel.Row, error)
	RowsOfDays(ctx context.Context, keys []readmodel.StatsKey, limit int) ([]readmodel.Row, error)
	StatsDriftOf(ctx context.Context, keys []readmodel.StatsKey) ([]readmodel.StatsDrift, error)
}

// AuditConfig configures an Audit.
type AuditConfig struct {
	// Store is the system of record. Required.
	Store store.Store
	// ReadModel is the read model (readmodel.New). Required.
	ReadModel AuditReadModel
	// Stream names the pipeline: the label of the metrics and the key of
	// the recorded run. Defaults to outbox.StreamDefault.
	Stream string
	// Routes and ProjectedStreams are as in Config: the audit skips the
	// originals Routes sends to a stream outside ProjectedStreams (which
	// defaults to Stream alone), and those of a type the read model holds
	// no rows of (TypedReadModel).
	Routes           outbox.Routes
	ProjectedStreams []string
	// Every is how often the service runs. Defaults to AuditEveryDefault
	// (1 minute).
	Every time.Duration
	// Sample is the most synced originals one run compares, from 1 to
	// AuditSampleMax. Defaults to AuditSampleDefault (1,000).
	Sample int
	// EventRetention is the store's retention of synced originals: a row
	// created before now minus it whose original is gone was expired, not
	// lost. Defaults to 0 (every row without an original is drift).
	EventRetention time.Duration
	// Now tells the time. Defaults to time.Now.
	Now func() time.Time
	// Registerer receives outboxd_audit_*. Defaults to none.
	Registerer prometheus.Registerer
}

// AuditFinding is one difference an audit run found.
type AuditFinding struct {
	Kind      string `json:"kind"`
	EventID   string `json:"eventId,omitempty"`
	SourceKey string `json:"sourceKey"`
	DeviceKey string `json:"deviceKey"`
	// Day is the UTC day (YYYY-MM-DD) of the event or statistics row.
	Day string `json:"day"`
	// Detail says what differs (content: the fields; stats: the counts).
	Detail string `json:"detail,omitempty"`
}

// AuditReport is what one audit run compared and found (the JSON of
// /v1/status's audit).
type AuditReport struct {
	Stream    string    `json:"stream"`
	StartedAt time.Time `json:"startedAt"`
	// DurationSeconds is how long the run took.
	DurationSeconds float64 `json:"durationSeconds"`
	// Skipped counts the sampled originals not compared: the read model
	// holds no row of them by design (AuditConfig.Routes, TypedReadModel).
	Skipped int `json:"skipped,omitempty"`
	// Checked counts the synced originals compared with their rows,
	// StatsChecked the statistics rows (days) compared with their rows,
	// RowsChecked the rows of those days looked up in the store.
	Checked      int `json:"checked"`
	StatsChecked int `json:"statsChecked"`
	RowsChecked  int `json:"rowsChecked"`
	// Drift counts the findings by kind (every kind present).
	Drift map[string]int `json:"drift"`
	// DriftRatio is the rows in drift (missing, extra, content) per
	// original checked: the accuracy SLO's measure (under 0.0001).
	DriftRatio float64 `json:"driftRatio"`
	// Findings names the first few findings.
	Findings []AuditFinding `json:"findings"`
	// CreatedFrom and CreatedTo bound the createdAt of the originals
	// compared (absent when none was).
	CreatedFrom *time.Time `json:"createdFrom,omitempty"`
	CreatedTo   *time.Time `json:"createdTo,omitempty"`
	// Wrapped is set when this run's walk through older originals reached
	// the oldest: the next run starts again at the newest.
	Wrapped bool `json:"wrapped"`
	// Repair holds the commands that fix what was found.
	Repair []string `json:"repair,omitempty"`
}

// DriftTotal is the number of findings of every kind.
func (r *AuditReport) DriftTotal() int {
	n := 0
	for _, v := range r.Drift {
		n += v
	}
	return n
}

// walkPos is where a walk through the synced originals, newest first by
// createdAt, stands: the next window ends before top; after, when set,
// continues inside the millisecond before top.
type walkPos struct {
	top   time.Time
	after *store.EventCursor
}

// Audit samples synced originals and compares each with its read-model
// row, and each sampled day's statistics with the rows, every
// AuditConfig.Every: the always-on form of verify. Each run compares at
// most Sample originals: half of them the newest (created since the last
// run, newest first), the rest from a walk through older windows of
// createdAt that continues where the last run stopped and starts again at
// the newest after reaching the oldest, so that the whole history is
// compared over time. Every query is bounded (a window of createdAt with a
// limit, ids in chunks of 1,000) and reads: the store's read connection and
// read-only PostgreSQL transactions, never a lock a worker waits for.
type Audit struct {
	life    startstop.Base
	cfg     AuditConfig
	scope   checkScope
	logger  *zap.Logger
	checked prometheus.Counter
	drift   *prometheus.CounterVec
	lastRun prometheus.Gauge
	errs    prometheus.Counter

	// The walks' state, touched by one run at a time.
	lastNow   time.Time
	hist      walkPos
	freshSpan time.Duration
	histSpan  time.Duration
}

// Validate checks the bounds of c as NewAudit takes them (a zero Every or
// Sample takes its default); each error names its field, and they are
// joined. It does not look for the backends NewAudit needs.
func (c *AuditConfig) Validate() error {
	var errs []error
	if every := cmp.Or(c.Every, AuditEveryDefault); every < AuditEveryShortest {
		errs = append(errs, bounds.Errorf("Every", every, "must be at least %s", AuditEveryShortest))
	}
	if sample := cmp.Or(c.Sample, AuditSampleDefault); sample < 1 || sample > AuditSampleMax {
		errs = append(errs, bounds.Errorf("Sample", sample, "must be from 1 to %d", AuditSampleMax))
	}
	return errors.Join(errs...)
}

// NewAudit returns an audit over cfg's backends; an invalid cfg is an
// error naming the field. A nil logger logs nothing.
func NewAudit(cfg *AuditConfig, logger *zap.Logger) (*Audit, error) {
	if cfg == nil || cfg.Store == nil || cfg.ReadModel == nil {
		return nil, errors.New("audit: a store and a read model are required")
	}
	c := *cfg
	c.Stream = cmp.Or(c.Stream, outbox.StreamDefault)
	c.Every = cmp.Or(c.Every, AuditEveryDefault)
	c.Sample = cmp.Or(c.Sample, AuditSampleDefault)
	if c.Now == nil {
		c.Now = time.Now
	}
	if err := c.Validate(); err != nil {
		return nil, fmt.Errorf("invalid audit config: %w", err)
	}
	if logger == nil {
		logger = zap.NewNop()
	}
	f := ometrics.NewFactory(c.Registerer, "audit", c.Stream)
	a := &Audit{cfg: c, logger: logger.Named("audit").With(zap.String("stream", c.Stream)),
		scope:   newCheckScope(c.ReadModel, c.Routes, c.Stream, c.ProjectedStreams),
		checked: f.Counter("checked_total", "Synced originals the audit compared with their read-model rows."),
		drift: f.CounterVec("drift_total", "Differences the audit found between the originals and the read model, by kind: missing (a synced original without its row), extra (a row without an original), content (a row that differs from its original), stats (a statistics row that differs from its rows).",
			"kind"),
		lastRun:   f.Gauge("last_run_timestamp_seconds", "When the last complete audit run ended (Unix time)."),
		errs:      f.Counter("errors_total", "Audit runs that failed (a backend could not be read)."),
		freshSpan: c.Every, histSpan: c.Every,
	}
	if err := f.Err(); err != nil {
		return nil, fmt.Errorf("error registering audit metrics: %w", err)
	}
	for _, k := range AuditKinds {
		a.drift.WithLabelValues(k)
	}
	a.life.Init(a.preflight, a.run)
	return a, nil
}

// Start checks that the store answers and runs the audit every Every in
// the background; on a running audit it does nothing.
func (a *Audit) Start(ctx context.Context) error { return a.life.Start(ctx) }

// Stop ends the schedule (a run in progress stops at its next query) and
// waits for it; when ctx ends first Stop returns ctx's error. It is
// idempotent and safe before Start.
func (a *Audit) Stop(ctx context.Context) error { return a.life.Stop(ctx) }

// Stopped is closed while the audit is not running.
func (a *Audit) Stopped() <-chan struct{} { return a.life.Stopped() }

func (a *Audit) preflight(ctx context.Context) error {
	if err := a.cfg.Store.Ping(ctx); err != nil {
		return fmt.Errorf("error reaching the store: %w", err)
	}
	return nil
}

func (a *Audit) run(fetchCtx, _ context.Context) error {
	a.logger.Debug("audit started", zap.Duration("every", a.cfg.Every), zap.Int("sample", a.cfg.Sample))
	defer a.logger.Debug("audit stopped")
	ticker := time.NewTicker(a.cfg.Every)
	defer ticker.Stop()
	for {
		select {
		case <-fetchCtx.Done():
			return nil
		case <-ticker.C:
		}
		rep, err := a.Run(fetchCtx)
		switch {
		case err != nil && fetchCtx.Err() != nil:
			return nil
		case err != nil:
			a.logger.Warn("audit run failed", zap.Error(err))
		case rep.DriftTotal() > 0:
			a.logger.Error("audit found drift between the originals and the read model; see the runbook OutboxdReadModelDrift",
				zap.Int("checked", rep.Checked), zap.Any("drift", rep.Drift), zap.Strings("repair", rep.Repair))
		case rep.Checked > 0:
			a.logger.Debug("audit run done", zap.Int("checked", rep.Checked), zap.Int("stats_checked", rep.StatsChecked))
		}
	}
}

// Run runs one audit: it samples, compares, counts the findings in the
// metrics and records the report for the status of every process (a
// failed record is logged; the report is still returned).
func (a *Audit) Run(ctx context.Context) (*AuditReport, error) {
	rep, err := a.audit(ctx)
	if err != nil {
		a.errs.Inc()
		return nil, err
	}
	a.checked.Add(float64(rep.Checked))
	for k, n := range rep.Drift {
		a.drift.WithLabelValues(k).Add(float64(n))
	}
	a.lastRun.Set(float64(rep.StartedAt.Unix()) + rep.DurationSeconds)
	b, err := json.Marshal(rep)
	if err == nil {
		err = a.cfg.ReadModel.SaveAudit(ctx, a.cfg.Stream, rep.StartedAt, b)
	}
	if err != nil && ctx.Err() == nil {
		a.logger.Warn("error recording the audit run for the status", zap.Error(err))
	}
	return rep, nil
}

func (a *Audit) audit(ctx context.Context) (*AuditReport, error) {
	began := time.Now()
	now := a.cfg.Now().UTC()
	rep := &AuditReport{Stream: a.cfg.Stream, StartedAt: now, Drift: map[string]int{}, Findings: []AuditFinding{}}
	for _, k := range AuditKinds {
		rep.Drift[k] = 0
	}
	defer func() { rep.DurationSeconds = time.Since(began).Seconds() }()

	oldest, err := a.cfg.Store.ListEvents(ctx, store.EventQuery{By: store.ByCreated, State: outbox.StateSynced, Limit: 1})
	if err != nil {
		return nil, storeErr("listing the oldest synced original", err)
	}
	if len(oldest) == 0 {
		a.lastNow, a.hist = now, walkPos{}
		return rep, nil
	}
	floor := oldest[0].CreatedAt.UTC()

	// The newest: what was created since the last run, newest first.
	freshBudget, freshFloor := a.cfg.Sample, floor
	if !a.lastNow.IsZero() {
		freshBudget = max(1, a.cfg.Sample/2)
		freshFloor = later(floor, a.lastNow)
	}
	sample, freshEnd, _, err := a.walk(ctx, walkPos{top: now.Add(auditMinSpan)}, freshFloor, freshBudget, &a.freshSpan)
	if err != nil {
		return nil, err
	}
	a.lastNow = now
	if a.hist.top.IsZero() {
		// The walk through older windows starts below the newest.
		a.hist = freshEnd
	}
	// Then older windows, where the last run's walk stopped.
	if budget := a.cfg.Sample - len(sample); budget > 0 {
		older, next, reached, err := a.walk(ctx, a.hist, floor, budget, &a.histSpan)
		if err != nil {
			return nil, err
		}
		a.hist = next
		if reached {
			a.hist, rep.Wrapped = walkPos{}, true
		}
		sample = append(sample, older...)
	}
	seen := make(map[string]bool, len(sample))
	sample = slices.DeleteFunc(sample, func(ev *outbox.Event) bool {
		dup := seen[ev.ID]
		seen[ev.ID] = true
		return dup
	})
	held := a.scope.filter(sample)
	rep.Skipped, sample = len(sample)-len(held), held
	if err := a.compare(ctx, now, sample, rep); err != nil {
		return nil, err
	}
	return rep, nil
}

// later returns the later of two times.
func later(a, b time.Time) time.Time {
	if a.After(b) {
		return a
	}
	return b
}

// walk lists at most budget synced originals created at or after floor and
// before pos, newest first: windows of createdAt ending at pos.top, each
// listed oldest first with a limit of budget+1; a window that holds more
// than budget is halved (down to a millisecond, whose overflow is
// continued with a cursor), one that holds few is doubled for the next.
// It returns the originals, where the walk stopped, and whether it reached
// floor.
func (a *Audit) walk(ctx context.Context, pos walkPos, floor time.Time, budget int, span *time.Duration) ([]*outbox.Event, walkPos, bool, error) {
	var out []*outbox.Event
	for range auditWalkQueries {
		if budget <= 0 {
			break
		}
		if !pos.top.After(floor) {
			return out, pos, true, nil
		}
		lo := pos.top.Add(-*span)
		if pos.after != nil {
			lo = pos.top.Add(-auditMinSpan)
		}
		lo = later(lo, floor)
		q := store.EventQuery{By: store.ByCreated, State: outbox.StateSynced, From: lo, To: pos.top, After: pos.after, Limit: budget + 1}
		page, err := a.cfg.Store.ListEvents(ctx, q)
		if err != nil {
			return nil, pos, false, storeErr("listing synced originals", err)
		}
		if len(page) > budget {
			if pos.after == nil && pos.top.Sub(lo) > auditMinSpan {
				*span = max(auditMinSpan, pos.top.Sub(lo)/2)
				continue
			}
			// One millisecond holds more than the budget: take the
			// budget, and continue after it.
			page = page[:budget]
			out = append(out, page...)
			pos.after = q.CursorOf(page[len(page)-1])
			return out, pos, false, nil
		}
		out = append(out, page...)
		budget -= len(page)
		pos = walkPos{top: lo}
		if len(page) < budget {
			*span = min(auditMaxSpan, 2**span)
		}
	}
	return out, pos, !pos.top.After(floor), nil
}

// compare compares the sample with the read model and fills rep.
func (a *Audit) compare(ctx context.Context, now time.Time, sample []*outbox.Event, rep *AuditReport) error {
	rep.Checked = len(sample)
	if len(sample) == 0 {
		return nil
	}
	from, to := sample[0].CreatedAt.UTC(), sample[0].CreatedAt.UTC()
	sampled := make(map[string]bool, len(sample))
	keys := map[readmodel.StatsKey]bool{}
	for _, ev := range sample {
		sampled[ev.ID] = true
		keys[readmodel.KeyOf(ev)] = true
		from, to = earlier(from, ev.CreatedAt.UTC()), later(to, ev.CreatedAt.UTC())
	}
	rep.CreatedFrom, rep.CreatedTo = &from, &to
	var repair repairWindow
	find := func(f AuditFinding, day time.Time) {
		rep.Drift[f.Kind]++
		if len(rep.Findings) < auditFindingsKept {
			rep.Findings = append(rep.Findings, f)
		}
		repair.add(f.Kind, day)
	}

	contents, ok := a.cfg.ReadModel.(AuditContents)
	if !ok {
		// A read model that tells only which originals it holds.
		for chunk := range slices.Chunk(sample, auditChunk) {
			found, err := a.cfg.ReadModel.Projected(ctx, eventIDs(chunk))
			if err != nil {
				return pgErr("reading rows", err)
			}
			for _, ev := range chunk {
				if !found[ev.ID] {
					day := ev.OccurredAt.UTC().Truncate(24 * time.Hour)
					find(AuditFinding{Kind: AuditMissing, EventID: ev.ID, SourceKey: ev.SourceKey, DeviceKey: ev.DeviceKey,
						Day: day.Format(time.DateOnly)}, day)
				}
			}
		}
		rep.DriftRatio = float64(rep.Drift[AuditMissing]) / float64(rep.Checked)
		rep.Repair = repair.commands()
		return nil
	}

	// Each original with its row.
	for chunk := range slices.Chunk(sample, auditChunk) {
		rows, err := contents.RowsByID(ctx, eventIDs(chunk))
		if err != nil {
			return pgErr("reading rows", err)
		}
		byID := make(map[string]readmodel.Row, len(rows))
		for _, r := range rows {
			byID[r.EventID] = r
		}
		for _, ev := range chunk {
			day := ev.OccurredAt.UTC().Truncate(24 * time.Hour)
			f := AuditFinding{EventID: ev.ID, SourceKey: ev.SourceKey, DeviceKey: ev.DeviceKey, Day: day.Format(time.DateOnly)}
			row, ok := byID[ev.ID]
			if !ok {
				f.Kind = AuditMissing
				find(f, day)
				continue
			}
			if diff := rowDiff(ev, row); diff != "" {
				f.Kind, f.Detail = AuditContent, diff
				find(f, day)
			}
		}
	}

	// Each sampled day: its statistics with its rows, its rows with their
	// originals.
	sortedKeys := slices.SortedFunc(maps.Keys(keys), readmodel.StatsKey.Compare)
	rep.StatsChecked = len(sortedKeys)
	var horizon time.Time
	if a.cfg.EventRetention > 0 {
		horizon = now.Add(-a.cfg.EventRetention)
	}
	for chunk := range slices.Chunk(sortedKeys, auditChunk) {
		drift, err := contents.StatsDriftOf(ctx, chunk)
		if err != nil {
			return pgErr("comparing statistics with rows", err)
		}
		for _, d := range drift {
			find(AuditFinding{Kind: AuditStats, SourceKey: d.SourceKey, DeviceKey: d.DeviceKey, Day: d.Day.Format(time.DateOnly),
				Detail: fmt.Sprintf("counted %d, rows %d", d.Counted, d.Rows)}, d.Day)
		}
		rows, err := contents.RowsOfDays(ctx, chunk, auditDayRows)
		if err != nil {
			return pgErr("reading the rows of the sampled days", err)
		}
		rows = slices.DeleteFunc(rows, func(r readmodel.Row) bool { return sampled[r.EventID] })
		rep.RowsChecked += len(rows)
		for rc := range slices.Chunk(rows, auditChunk) {
			ids := rowIDs(rc)
			loaded, err := a.cfg.Store.LoadEvents(ctx, ids)
			if err != nil {
				return storeErr(fmt.Sprintf("reading the originals of %d rows", len(ids)), err)
			}
			for _, r := range rc {
				if _, ok := loaded[r.EventID]; ok || r.CreatedAt.Before(horizon) {
					continue
				}
				day := r.OccurredAt.UTC().Truncate(24 * time.Hour)
				find(AuditFinding{Kind: AuditExtra, EventID: r.EventID, SourceKey: r.SourceKey, DeviceKey: r.DeviceKey,
					Day: day.Format(time.DateOnly)}, day)
			}
		}
	}
	rep.DriftRatio = float64(rep.Drift[AuditMissing]+rep.Drift[AuditExtra]+rep.Drift[AuditContent]) / float64(rep.Checked)
	rep.Repair = repair.commands()
	return nil
}

// earlier returns the earlier of two times.
func earlier(a, b time.Time) time.Time {
	if a.Before(b) {
		return a
	}
	return b
}

// rowDiff names the fields in which row differs from its original ("":
// none). The payload is not compared (as verify does not).
func rowDiff(ev *outbox.Event, row readmodel.Row) string {
	var diff []string
	if row.IdempotencyKey != ev.IdempotencyKey {
		diff = append(diff, "idempotencyKey")
	}
	if row.SourceKey != ev.SourceKey {
		diff = append(diff, "sourceKey")
	}
	if row.DeviceKey != ev.DeviceKey {
		diff = append(diff, "deviceKey")
	}
	if row.Type != ev.Type {
		diff = append(diff, "type")
	}
	if !row.OccurredAt.Equal(ev.OccurredAt) {
		diff = append(diff, "occurredAt")
	}
	if !row.CreatedAt.Equal(ev.CreatedAt) {
		diff = append(diff, "createdAt")
	}
	return strings.Join(diff, ", ")
}

// repairWindow collects the days of the findings by what fixes them.
type repairWindow struct {
	verify, rebuild, extra dayRange
}

type dayRange struct{ from, to time.Time }

func (r *dayRange) add(day time.Time) {
	if r.from.IsZero() || day.Before(r.from) {
		r.from = day
	}
	if day.Add(24 * time.Hour).After(r.to) {
		r.to = day.Add(24 * time.Hour)
	}
}

func (r dayRange) flags() string {
	return fmt.Sprintf("--from %s --to %s", r.from.Format(time.RFC3339), r.to.Format(time.RFC3339))
}

func (w *repairWindow) add(kind string, day time.Time) {
	switch kind {
	case AuditMissing, AuditStats:
		w.verify.add(day)
	case AuditContent:
		w.rebuild.add(day)
	case AuditExtra:
		w.extra.add(day)
	}
}

// commands returns the commands that fix the findings: verify --repair
// for missing rows and statistics, replay --rebuild for rows whose content
// differs, and verify alone for rows without an original (it lists them;
// deleting read-model rows is a person's decision).
func (w *repairWindow) commands() []string {
	var out []string
	if !w.verify.from.IsZero() {
		out = append(out, "outboxd verify "+w.verify.flags()+" --repair --yes")
	}
	if !w.rebuild.from.IsZero() {
		out = append(out, "outboxd replay "+w.rebuild.flags()+" --rebuild --yes")
	}
	if !w.extra.from.IsZero() {
		out = append(out, "outboxd verify "+w.extra.flags()+" (lists the rows without an original; removing them is a decision for a person)")
	}
	return out
}

// LastAudit returns the report of the last audit run recorded for stream
// (nil when none was).
func LastAudit(ctx context.Context, rm AuditReadModel, stream string) (*AuditReport, error) {
	b, err := rm.LastAudit(ctx, cmp.Or(stream, outbox.StreamDefault))
	if err != nil || b == nil {
		return nil, err
	}
	var rep AuditReport
	if err := json.Unmarshal(b, &rep); err != nil {
		return nil, fmt.Errorf("error decoding the last audit run: %w", err)
	}
	return &rep, nil
}
