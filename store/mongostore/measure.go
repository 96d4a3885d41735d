package mongostore

import (
	"cmp"
	"context"
	"fmt"
	"maps"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/outboxd/outboxd/outbox"
	"github.com/outboxd/outboxd/store"
)

// Sizes of the paths MeasureCommands runs, by default.
const (
	MeasureIngestGroupDefault     = 500  // one batch request of httpapi.MaxBatchDefault
	MeasureWorkerBatchDefault     = 2000 // worker.BatchSizeDefault
	MeasureDispatcherBatchDefault = 2000 // dispatcher.BatchSizeDefault
	MeasureReconcilerSweepDefault = 1000 // reconciler.LimitDefault
)

// MeasureConfig sizes the paths of MeasureCommands. A zero field takes its
// default (MeasureIngestGroupDefault …).
type MeasureConfig struct {
	IngestGroup, WorkerBatch, DispatcherBatch, ReconcilerSweep int
}

// CommandRow is one path's commands.
type CommandRow struct {
	// Path names the path and Events its size.
	Path   string `json:"path"`
	Events int    `json:"events"`
	// Calls are the store calls the path makes, as its component makes
	// them.
	Calls string `json:"calls"`
	// Commands counts the commands by name; Total sums them.
	Commands map[string]int `json:"commands"`
	Total    int            `json:"total"`
}

// CommandList renders the commands as "name n, …", by name.
func (r CommandRow) CommandList() string {
	names := slices.Sorted(maps.Keys(r.Commands))
	parts := make([]string, len(names))
	for i, n := range names {
		parts[i] = fmt.Sprintf("%s %d", n, r.Commands[n])
	}
	return strings.Join(parts, ", ")
}

// CommandTable is what MeasureCommands measured, and on which engine.
type CommandTable struct {
	// Engine is "lungo" (counted at the engine's boundary) or "driver"
	// (counted by the driver's command monitor).
	Engine string       `json:"engine"`
	Rows   []CommandRow `json:"rows"`
}

// String renders the table as Markdown.
func (t CommandTable) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "| path (%s) | events | store calls | commands | total |\n| --- | --- | --- | --- | --- |\n", t.Engine)
	for _, r := range t.Rows {
		fmt.Fprintf(&b, "| %s | %d | %s | %s | %d |\n", r.Path, r.Events, r.Calls, r.CommandList(), r.Total)
	}
	return b.String()
}

// MeasureCommands counts the commands of outboxd's paths through the
// MongoDB store at uri (LungoMemory, or a replica set: then give
// opts.Database a database of its own, which it fills and leaves for the
// caller to drop): an ingest group (cfg.IngestGroup single-event requests
// that share one transaction of the Committer), a worker batch (the
// originals read, then syncedAt set), a dispatcher batch from the catch-up
// and one from the feed (the entries read, marked under the lease, the
// checkpoint written) and a reconciler sweep (the candidates, each claim,
// the counts). It runs each component's store calls, not the components:
// their Redis and PostgreSQL work is not the store's. The data it needs is
// written before each path's count begins.
func MeasureCommands(ctx context.Context, uri string, opts *Options, cfg MeasureConfig) (CommandTable, error) {
	o := Options{}
	if opts != nil {
		o = *opts
	}
	o.CountsTTL = -1
	o.Commands = &CommandCounter{}
	s, err := Open(ctx, uri, &o)
	if err != nil {
		return CommandTable{}, err
	}
	defer func() { _ = s.Close(context.WithoutCancel(ctx)) }()
	if err := s.Migrate(ctx, nil); err != nil {
		return CommandTable{}, err
	}
	m := &measurer{s: s, c: o.Commands, stream: "measure", table: CommandTable{Engine: "driver"}}
	// The number of partitions a deployment's first component records:
	// the Writers read it until it is recorded.
	if err := store.EnsurePartitions(ctx, s, m.stream, outbox.PartitionsDefault); err != nil {
		return CommandTable{}, err
	}
	if s.lungo {
		m.table.Engine = "lungo"
	}
	for _, step := range []struct {
		run func(context.Context, int) error
		n   int
	}{
		{m.ingest, cmp.Or(cfg.IngestGroup, MeasureIngestGroupDefault)},
		{m.worker, cmp.Or(cfg.WorkerBatch, MeasureWorkerBatchDefault)},
		{m.dispatcherCatchUp, cmp.Or(cfg.DispatcherBatch, MeasureDispatcherBatchDefault)},
		{m.dispatcherFeed, cmp.Or(cfg.DispatcherBatch, MeasureDispatcherBatchDefault)},
		{m.reconciler, cmp.Or(cfg.ReconcilerSweep, MeasureReconcilerSweepDefault)},
	} {
		if err := step.run(ctx, step.n); err != nil {
			return m.table, err
		}
	}
	return m.table, nil
}

// measurer runs the paths of MeasureCommands.
type measurer struct {
	s      *Store
	c      *CommandCounter
	stream string
	table  CommandTable
	seq    int
}

// record adds the counts since the last Reset as a row.
func (m *measurer) record(path, calls string, events int) {
	m.table.Rows = append(m.table.Rows, CommandRow{Path: path, Events: events, Calls: calls, Commands: m.c.Counts(), Total: m.c.Total()})
}

// inputs returns n new inputs.
func (m *measurer) inputs(n int) []outbox.Input {
	out := make([]outbox.Input, n)
	for i := range out {
		m.seq++
		out[i] = outbox.Input{SourceKey: "measure", DeviceKey: fmt.Sprint("d", m.seq%50), OccurredAt: "2026-11-01T10:00:00Z",
			IdempotencyKey: fmt.Sprint("measure-", m.seq), Payload: []byte(`{"t":21.5,"n":3}`)}
	}
	return out
}

// seed writes n originals created at createdAt, in transactions of at
// most 500, and returns their ids.
func (m *measurer) seed(ctx context.Context, n int, createdAt time.Time) ([]string, error) {
	w := outbox.NewWriter(m.s, &outbox.WriterConfig{Stream: m.stream, Now: func() time.Time { return createdAt }})
	ids := make([]string, 0, n)
	for len(ids) < n {
		res, err := w.Write(ctx, m.inputs(min(500, n-len(ids))))
		if err != nil {
			return nil, err
		}
		for _, r := range res {
			ids = append(ids, r.ID)
		}
	}
	return ids, nil
}

// ingest: n single-event requests of POST /v1/events that share one
// transaction of the Committer (its group: one lookup of their keys, one
// insert of the originals, one of the entries, the commit).
func (m *measurer) ingest(ctx context.Context, n int) error {
	w := outbox.NewWriter(m.s, &outbox.WriterConfig{Stream: m.stream})
	// A Writer reads its stream's recorded number of partitions once, at
	// its first write: one find that is no group's.
	if _, err := w.Write(ctx, m.inputs(1)); err != nil {
		return err
	}
	cm, err := outbox.NewCommitter(w, &outbox.CommitterConfig{GroupMax: n, GroupWait: outbox.GroupWaitMax,
		GroupMaxBytes: outbox.GroupMaxBytesMax, GroupTimeout: time.Minute})
	if err != nil {
		return err
	}
	batches := make([]*outbox.Batch, n)
	for i, in := range m.inputs(n) {
		if batches[i], err = w.Prepare([]outbox.Input{in}); err != nil {
			return err
		}
	}
	if err := cm.Start(ctx); err != nil {
		return err
	}
	m.c.Reset()
	errs := make([]error, n)
	var wg sync.WaitGroup
	for i, b := range batches {
		wg.Go(func() { _, errs[i] = cm.Write(ctx, b) })
	}
	wg.Wait()
	m.record("ingest group", "WriteTx: LookupKeys, InsertEvents, InsertEntries", n)
	if err := cm.Stop(ctx); err != nil {
		return err
	}
	for _, err := range errs {
		if err != nil {
			return fmt.Errorf("error measuring the ingest group: %w", err)
		}
	}
	return nil
}

// worker: one batch of the worker: its originals read, then syncedAt set
// (worker/processor.go, worker/tail.go).
func (m *measurer) worker(ctx context.Context, n int) error {
	ids, err := m.seed(ctx, n, time.Now())
	if err != nil {
		return err
	}
	m.c.Reset()
	loaded, err := m.s.LoadEvents(ctx, ids)
	if err != nil {
		return err
	}
	if len(loaded) != n {
		return fmt.Errorf("error measuring the worker batch: %d of %d originals read", len(loaded), n)
	}
	if _, err := m.s.MarkSynced(ctx, ids, time.Now()); err != nil {
		return err
	}
	m.record("worker batch", "LoadEvents, MarkSynced", n)
	return nil
}

// relay is the dispatcher's store work for a batch it relayed: the entries
// marked and the checkpoint written under its lease, in one transaction
// (MarkRelayed, dispatcher/relay.go).
func (m *measurer) relay(ctx context.Context, lease store.Lease, entries []outbox.Entry, pos store.Position) error {
	ids := make([]string, len(entries))
	for i, e := range entries {
		ids[i] = e.ID
	}
	return m.s.MarkRelayed(ctx, lease, ids, store.Checkpoint{Position: pos, At: time.Now()})
}

// lease takes the dispatcher's lease of the measured stream.
func (m *measurer) lease(ctx context.Context) (store.Lease, error) {
	return m.s.AcquireLease(ctx, m.stream, "measure", time.Now(), time.Minute)
}

// dispatcherCatchUp: a batch of the dispatcher's catch-up: the
// undispatched entries read, marked and checkpointed.
func (m *measurer) dispatcherCatchUp(ctx context.Context, n int) error {
	// The worker's originals left their entries undispatched; top up.
	have, err := m.s.Undispatched(ctx, m.stream, store.Partition{}, "", n)
	if err != nil {
		return err
	}
	if len(have) < n {
		if _, err := m.seed(ctx, n-len(have), time.Now()); err != nil {
			return err
		}
	}
	lease, err := m.lease(ctx)
	if err != nil {
		return err
	}
	m.c.Reset()
	entries, err := m.s.Undispatched(ctx, m.stream, store.Partition{}, "", n)
	if err != nil {
		return err
	}
	if err := m.relay(ctx, lease, entries, nil); err != nil {
		return err
	}
	m.record("dispatcher batch, catch-up", "Undispatched, MarkRelayed", len(entries))
	return nil
}

// dispatcherFeed: a batch the dispatcher's feed delivered (a change
// stream's batches), marked and checkpointed.
func (m *measurer) dispatcherFeed(ctx context.Context, n int) error {
	f, err := m.s.OpenFeed(ctx, m.stream, nil, store.FeedOptions{PollInterval: 50 * time.Millisecond})
	if err != nil {
		return err
	}
	defer func() { _ = f.Close(context.WithoutCancel(ctx)) }()
	if _, err := m.seed(ctx, n, time.Now()); err != nil {
		return err
	}
	lease, err := m.lease(ctx)
	if err != nil {
		return err
	}
	m.c.Reset()
	var entries []outbox.Entry
	deadline := time.Now().Add(time.Minute)
	for len(entries) < n && time.Now().Before(deadline) {
		got, err := f.Next(ctx, n-len(entries), time.Second)
		if err != nil {
			return err
		}
		entries = append(entries, got...)
	}
	if len(entries) < n {
		return fmt.Errorf("error measuring the feed: %d of %d entries delivered", len(entries), n)
	}
	if err := m.relay(ctx, lease, entries, f.Position()); err != nil {
		return err
	}
	m.record("dispatcher batch, feed", "Feed.Next, MarkRelayed", n)
	return nil
}

// reconciler: one sweep of the reconciler over n candidates: the
// candidate query, the claim of them all, and the counts it reports
// (reconciler/reconciler.go; its publishing is Redis's).
func (m *measurer) reconciler(ctx context.Context, n int) error {
	created := time.Now().Add(-time.Hour)
	if _, err := m.seed(ctx, n, created); err != nil {
		return err
	}
	now := time.Now().UTC().Truncate(time.Millisecond)
	m.c.Reset()
	ids, err := m.s.Candidates(ctx, store.CandidateQuery{CreatedBefore: now.Add(-5 * time.Minute), ClaimedBefore: now.Add(-30 * time.Minute), Limit: n})
	if err != nil {
		return err
	}
	if len(ids) != n {
		return fmt.Errorf("error measuring the reconciler: %d of %d candidates", len(ids), n)
	}
	claimed, err := m.s.Claim(ctx, ids, now, now.Add(-30*time.Minute))
	if err != nil {
		return err
	}
	if len(claimed.Events) != n {
		return fmt.Errorf("error measuring the reconciler: claimed %d of %d candidates", len(claimed.Events), n)
	}
	if _, err := m.s.Counts(ctx); err != nil {
		return err
	}
	m.record("reconciler sweep", "Candidates, Claim, Counts", n)
	return nil
}
