package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
	"time"
)

// Shape of the partitions run.
const (
	partitionsEventsDefault = 50_000
)

// Partition counts and dispatcher counts the partitions run measures.
var (
	benchPartitions  = []int{1, 2, 4}
	benchDispatchers = []int{1, 2}
)

// PartitionRow is one row of the partitions table: the dispatcher and
// worker rates of P partitions relayed by D dispatchers, each over the
// whole run (processes' start to the last entry), and their ratios to the
// first row's (P = 1, D = 1). StartupSeconds is how long until every
// partition's stream held an entry (the processes' start and the
// partitions' leases); SteadyEventsPerSecond is the relay's rate from then
// on, over the entries still to relay then (0 when none were left).
type PartitionRow struct {
	Partitions                int
	Dispatchers               int
	StartupSeconds            float64
	DispatcherEventsPerSecond float64
	SteadyEventsPerSecond     float64
	WorkerEventsPerSecond     float64
	DispatcherRatio           float64
	WorkerRatio               float64
}

// runPartitions is `outboxd-bench partitions`: for P in 1, 2, 4 it ingests
// BENCH_EVENTS events through `outboxd ingest --partitions P` (batches)
// into a fresh SQLite file; then, for D in 1, 2, it relays a copy of that
// backlog with D `outboxd dispatch --partitions P` processes (the
// dispatcher rate: from the processes' start until no entry is
// undispatched and the partitions' streams hold every entry; beside it,
// when every partition's stream held an entry and the rate from then on), and drains the relayed copy with one `outboxd
// work --partitions P` (the worker rate: until every original is synced).
// It prints the table. On the Redis of BENCH_REDIS_URL, or with -cluster on
// a local Redis Cluster of three masters it starts (for P = 2 and 4: a
// cluster needs two partitions or more; its ratios are to its own first
// row).
func runPartitions(ctx context.Context, out io.Writer, args []string) error {
	fs := flag.NewFlagSet("outboxd-bench partitions", flag.ContinueOnError)
	bin := fs.String("bin", "bin/outboxd", "the outboxd binary (make build)")
	cluster := fs.Bool("cluster", false, "run on a local Redis Cluster of three masters (redis-server, redis-cli) instead of BENCH_REDIS_URL; from 2 partitions (a cluster needs them)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	n, err := intEnv("BENCH_EVENTS", partitionsEventsDefault, batchEvents)
	if err != nil {
		return err
	}
	b, err := newRun(ctx, out, *bin, n)
	if err != nil {
		return err
	}
	be := b.be
	defer be.close()
	b.total = n
	parts, redisKind := benchPartitions, "one Redis"
	if *cluster {
		if err := be.useCluster(ctx); err != nil {
			return err
		}
		parts, redisKind = benchPartitions[1:], "a local Redis Cluster of three masters"
	}
	fmt.Fprintf(out, "outboxd partitions benchmark: %d events on %s (SQLite store, %s); logs in %s\n", n, machine(), redisKind, be.dir)
	var rows []PartitionRow
	for _, p := range parts {
		b.partitions, b.stream = p, be.stream("partitions-"+strconv.Itoa(p))
		if err := b.ingestPartitioned(ctx); err != nil {
			return err
		}
		for _, d := range benchDispatchers {
			name := fmt.Sprintf("p%d-d%d", p, d)
			dt, _, err := b.dispatch(ctx, "dispatch-"+name, d, 0)
			if err != nil {
				return err
			}
			if err := copySQLite(b.be.file(fileRun), b.be.file(fileRelayed)); err != nil {
				return err
			}
			wt, _, _, err := b.work(ctx, "work-"+name, 1, 0)
			if err != nil {
				return err
			}
			row := PartitionRow{Partitions: p, Dispatchers: d, StartupSeconds: b.startup.took.Seconds(),
				DispatcherEventsPerSecond: perSecond(n, dt.wall), WorkerEventsPerSecond: perSecond(n, wt.wall)}
			if left := n - b.startup.relayed; left > 0 {
				row.SteadyEventsPerSecond = perSecond(left, dt.wall-b.startup.took)
			}
			fmt.Fprintf(out, "  P=%d D=%d: dispatcher %.0f ev/s (%s; every partition relaying after %s, %.0f ev/s from then), worker %.0f ev/s (%s)\n",
				p, d, row.DispatcherEventsPerSecond, dt.wall.Round(time.Millisecond), b.startup.took.Round(time.Millisecond),
				row.SteadyEventsPerSecond, row.WorkerEventsPerSecond, wt.wall.Round(time.Millisecond))
			rows = append(rows, row)
		}
	}
	_, err = io.WriteString(out, partitionTable(rows))
	return err
}

// ingestPartitioned posts b.n events in batches to `outboxd ingest
// --partitions b.partitions` on a fresh SQLite file, and keeps it as the
// backlog snapshot.
func (b *bench) ingestPartitioned(ctx context.Context) error {
	path := b.be.file(fileStages)
	_ = os.Remove(path)
	if err := newSQLite(ctx, path); err != nil {
		return err
	}
	name := "ingest-p" + strconv.Itoa(b.partitions)
	p, err := b.l.start(ctx, name, "ingest", append([]string{"--store", storeFlag(path), "--stream", b.stream}, b.partitionFlags()...)...)
	if err != nil {
		return err
	}
	d := newClient(p.url(""), "", batchClients).batches(name, b.n)
	if _, err := d.run(ctx); err != nil {
		abort(p)
		return fmt.Errorf("%s: %w", name, err)
	}
	if _, err := b.l.finish(name, p); err != nil {
		return err
	}
	c, err := counts(ctx, path)
	if err != nil {
		return err
	}
	if c.Total != int64(b.n) || c.Undispatched != int64(b.n) {
		return fmt.Errorf("%s: the store holds %d originals and %d undispatched entries, not %d", name, c.Total, c.Undispatched, b.n)
	}
	return copySQLite(path, b.be.file(fileBacklog))
}

// partitionTable fills in the rows' ratios to the first row and formats
// them as a Markdown table (the one docs/benchmarks.md holds).
func partitionTable(rows []PartitionRow) string {
	var sb strings.Builder
	sb.WriteString("| partitions | dispatchers | dispatcher ev/s | ratio | every partition relaying after | dispatcher ev/s from then | worker ev/s | ratio |\n")
	sb.WriteString("|---:|---:|---:|---:|---:|---:|---:|---:|\n")
	for i := range rows {
		r := &rows[i]
		r.DispatcherRatio = ratio(r.DispatcherEventsPerSecond, rows[0].DispatcherEventsPerSecond)
		r.WorkerRatio = ratio(r.WorkerEventsPerSecond, rows[0].WorkerEventsPerSecond)
		fmt.Fprintf(&sb, "| %d | %d | %.0f | %.2f | %.1f s | %.0f | %.0f | %.2f |\n", r.Partitions, r.Dispatchers,
			r.DispatcherEventsPerSecond, r.DispatcherRatio, r.StartupSeconds, r.SteadyEventsPerSecond, r.WorkerEventsPerSecond, r.WorkerRatio)
	}
	return sb.String()
}
