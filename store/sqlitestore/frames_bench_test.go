package sqlitestore_test

import (
	"cmp"
	"context"
	"database/sql"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/outboxd/outboxd/outbox"
	"github.com/outboxd/outboxd/store/sqlitestore"
)

// BenchmarkWALFrames: which tables and indexes the WAL frames of ingest's
// commits belong to. A commit writes every page it touched as one frame
// (two pwrites), so frames per event are what an index costs ingest on
// SQLite. The store holds OUTBOXD_BENCH_PREFILL originals first (default
// 100,000, written in commits of 2,000 and checkpointed), then b.N commits
// of OUTBOXD_BENCH_COMMIT events each (default 2,000; 1 is a light load)
// are written with the checkpoint held off, and each frame they added is
// attributed to its page's owner (SQLite's dbstat). It reports frames per
// event in all and for each owner with at least 0.01; docs/benchmarks.md
// ("Fifth pass") has a run.
//
//	go test ./store/sqlitestore -run '^$' -bench WALFrames -benchtime 5x
func BenchmarkWALFrames(b *testing.B) {
	prefill := benchEnvInt(b, "OUTBOXD_BENCH_PREFILL", 100_000)
	size := benchEnvInt(b, "OUTBOXD_BENCH_COMMIT", 2_000)
	ctx := context.Background()
	path := filepath.Join(b.TempDir(), "outboxd.db")
	s, _ := prefilledStore(b, path, prefill)
	if err := s.Close(ctx); err != nil { // checkpoints the WAL into the file
		b.Fatal(err)
	}
	s, err := sqlitestore.Open(ctx, path, &sqlitestore.Options{CheckpointInterval: 24 * time.Hour})
	if err != nil {
		b.Fatal(err)
	}
	w := outbox.NewWriter(s, nil)
	from := walSize(b, path)
	events := 0
	for b.Loop() {
		if _, err := w.Write(ctx, benchInputs("measured", events, size)); err != nil {
			b.Fatal(err)
		}
		events += size
	}
	wal, err := os.ReadFile(path + "-wal")
	if err != nil {
		b.Fatal(err)
	}
	owners := pageOwners(b, path) // before Close, which checkpoints
	if err := s.Close(ctx); err != nil {
		b.Fatal(err)
	}
	const frame = 24 + 4096 // frame header, page
	by := map[string]int{}
	total := 0
	for off := from; off+frame <= int64(len(wal)); off += frame {
		by[owners[binary.BigEndian.Uint32(wal[off:])]]++
		total++
	}
	b.ReportMetric(float64(total)/float64(events), "frames/event")
	names := make([]string, 0, len(by))
	for name := range by {
		names = append(names, name)
	}
	slices.SortFunc(names, func(x, y string) int { return cmp.Compare(by[y], by[x]) })
	for _, name := range names {
		if per := float64(by[name]) / float64(events); per >= 0.01 {
			b.ReportMetric(per, cmp.Or(name, "free")+"-frames/event")
		}
	}
}

// BenchmarkIngestTx: how long ingest's transaction holds the store's one
// writer per event, what bounds batch ingest on SQLite (docs/benchmarks.md,
// "Seventh pass"). The store holds OUTBOXD_BENCH_PREFILL originals first
// (default 100,000), then each iteration writes one group of
// OUTBOXD_BENCH_COMMIT new keyless events (default 1,000, the groups four
// clients posting batches of 500 form) prepared beforehand, as the
// committer's requests are, with the background checkpoint running. It
// reports µs per event; the machine's noise is some 10%, so compare two
// builds in alternated runs.
//
//	go test ./store/sqlitestore -run '^$' -bench IngestTx -benchtime 150x
func BenchmarkIngestTx(b *testing.B) {
	prefill := benchEnvInt(b, "OUTBOXD_BENCH_PREFILL", 100_000)
	size := benchEnvInt(b, "OUTBOXD_BENCH_COMMIT", 1_000)
	ctx := context.Background()
	s, w := prefilledStore(b, filepath.Join(b.TempDir(), "outboxd.db"), prefill)
	b.Cleanup(func() { _ = s.Close(ctx) })
	events := 0
	var held time.Duration
	for b.Loop() {
		b.StopTimer()
		batch, err := w.Prepare(benchInputs("measured", events, size))
		if err != nil {
			b.Fatal(err)
		}
		b.StartTimer()
		began := time.Now()
		if _, err := w.WriteBatch(ctx, batch); err != nil {
			b.Fatal(err)
		}
		held += time.Since(began)
		events += size
	}
	b.ReportMetric(float64(held.Nanoseconds())/1e3/float64(events), "µs/event")
}

// prefilledStore opens a migrated store at path holding prefill originals,
// written in commits of 2,000, with a writer on it.
func prefilledStore(b *testing.B, path string, prefill int) (*sqlitestore.Store, *outbox.Writer) {
	ctx := context.Background()
	s, err := sqlitestore.Open(ctx, path, nil)
	if err != nil {
		b.Fatal(err)
	}
	if err := s.Migrate(ctx, nil); err != nil {
		b.Fatal(err)
	}
	w := outbox.NewWriter(s, nil)
	for i := 0; i < prefill; i += 2_000 {
		if _, err := w.Write(ctx, benchInputs("before", i, min(2_000, prefill-i))); err != nil {
			b.Fatal(err)
		}
	}
	return s, w
}

// benchInputs returns n keyless events of source from the i-th on: 100
// devices, a small payload, the key derived from source, device and time
// (as cmd/outboxd-bench posts them).
func benchInputs(source string, i, n int) []outbox.Input {
	base := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	in := make([]outbox.Input, n)
	for k := range in {
		j := i + k
		in[k] = outbox.Input{SourceKey: source, DeviceKey: "d" + strconv.Itoa(j%100),
			OccurredAt: base.Add(time.Duration(j) * time.Second).Format(time.RFC3339),
			Payload:    json.RawMessage(`{"t":21.5,"n":` + strconv.Itoa(j%10) + `}`)}
	}
	return in
}

// walSize is the size of path's WAL, at least its header's 32 bytes.
func walSize(b *testing.B, path string) int64 {
	st, err := os.Stat(path + "-wal")
	if err != nil {
		b.Fatal(err)
	}
	return max(st.Size(), 32)
}

// pageOwners maps each page of the database to the table or index it
// belongs to (dbstat), reading through a connection of its own.
func pageOwners(b *testing.B, path string) map[uint32]string {
	db, err := sql.Open("sqlite", "file:"+path+"?mode=ro")
	if err != nil {
		b.Fatal(err)
	}
	defer func() { _ = db.Close() }()
	rows, err := db.Query(`SELECT name, pageno FROM dbstat`)
	if err != nil {
		b.Fatal(fmt.Errorf("dbstat: %w", err))
	}
	defer func() { _ = rows.Close() }()
	out := map[uint32]string{}
	for rows.Next() {
		var name string
		var page uint32
		if err := rows.Scan(&name, &page); err != nil {
			b.Fatal(err)
		}
		out[page] = name
	}
	if err := rows.Err(); err != nil {
		b.Fatal(err)
	}
	return out
}

// benchEnvInt reads a positive integer from the environment, or def.
func benchEnvInt(b *testing.B, name string, def int) int {
	v := os.Getenv(name)
	if v == "" {
		return def
	}
	n, err := strconv.Atoi(v)
	if err != nil || n < 1 {
		b.Fatalf("%s must be a positive integer (got %q)", name, v)
	}
	return n
}
