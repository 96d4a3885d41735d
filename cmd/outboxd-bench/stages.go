package main

import (
	"context"
	"fmt"
	"strconv"
	"time"

	"github.com/outboxd/outboxd/internal/stream"
	"github.com/outboxd/outboxd/store"
	"github.com/outboxd/outboxd/store/sqlitestore"
)

// Stage names.
const (
	stageIngestBatch  = "ingest-batch"
	stageIngestSingle = "ingest-single"
	stageDispatcher   = "dispatcher"
	stageWorker1      = "worker-1"
	stageWorker2      = "worker-2"
	stageEndToEnd     = "end-to-end"
	stageLatency      = "latency"
)

// Load shapes of the stages.
const (
	batchClients  = 4
	singleClients = 8
	// singleMax bounds the events of ingest-single.
	singleMax = 30_000
	// latencyRate and latencyFor are the offered load of the latency stage;
	// latencySenders is enough senders to keep it up while some wait.
	latencyRate    = 2_000
	latencyFor     = 15 * time.Second
	latencySenders = 64
	// pollEvery is how often completion is polled (on Redis, which answers
	// in microseconds; the store's counts are read once Redis says done).
	pollEvery = 5 * time.Millisecond
)

// Files of the stages in the run's folder.
const (
	fileStages  = "stages.db"  // ingest writes it
	fileBacklog = "backlog.db" // snapshot: every entry undispatched
	fileRelayed = "relayed.db" // snapshot: every entry relayed, none synced
	fileRun     = "run.db"     // the copy a dispatcher or worker run works on
)

// storeFlag returns the --store value of the SQLite file path.
func storeFlag(path string) string { return "sqlite:" + path }

// openStore opens the SQLite file path for the harness's own reads.
func openStore(ctx context.Context, path string) (*sqlitestore.Store, error) {
	return sqlitestore.Open(ctx, path, &sqlitestore.Options{ReadConns: 1})
}

// counts reads the counts of the SQLite file path.
func counts(ctx context.Context, path string) (store.Counts, error) {
	st, err := openStore(ctx, path)
	if err != nil {
		return store.Counts{}, err
	}
	defer func() { _ = st.Close(context.Background()) }()
	return st.Counts(ctx)
}

// newSQLite creates the migrated SQLite file path.
func newSQLite(ctx context.Context, path string) error {
	st, err := sqlitestore.Open(ctx, path, nil)
	if err != nil {
		return err
	}
	err = st.Migrate(ctx, nil)
	if cerr := st.Close(ctx); err == nil {
		err = cerr
	}
	return err
}

// ingest runs the two ingest stages on a new, migrated file, then keeps it
// as the backlog snapshot.
func (b *bench) ingest(ctx context.Context) error { return b.ingestN(ctx, min(b.n/4, singleMax)) }

// ingestN is ingest with singles single events.
func (b *bench) ingestN(ctx context.Context, singles int) error {
	path := b.be.file(fileStages)
	if err := removeSQLite(path); err != nil {
		return err
	}
	if err := newSQLite(ctx, path); err != nil {
		return err
	}
	n := b.n
	for _, s := range []struct {
		stage Stage
		drive func(c *client) drive
		after func(context.Context, *proc) error
	}{
		{Stage{Name: stageIngestBatch, Events: n, LimitName: limitInsert500}, func(c *client) drive { return c.batches(stageIngestBatch, n) }, nil},
		{Stage{Name: stageIngestSingle, Events: singles, LimitName: limitInsert1}, func(c *client) drive { return c.singles(stageIngestSingle, singles) }, b.httpCeiling},
	} {
		p, err := b.l.start(ctx, s.stage.Name, "ingest", "--store", storeFlag(path), "--stream", b.stream)
		if err != nil {
			return err
		}
		if err := b.driveStage(ctx, p, s.stage, s.drive(newClient(p.url(""), "", singleClients)), nil, s.after); err != nil {
			return err
		}
	}
	c, err := counts(ctx, path)
	if err != nil {
		return err
	}
	b.total = n + singles
	if c.Total != int64(b.total) || c.Undispatched != int64(b.total) {
		return fmt.Errorf("after ingest the store holds %d originals and %d undispatched entries, not %d", c.Total, c.Undispatched, b.total)
	}
	return copySQLite(path, b.be.file(fileBacklog))
}

// driveStage drives the API of p, waits for until when set, stops p and
// records stage s, timed from the first request until the end of the
// wait, with the requests' latency and the group commit's histogram.
// after, when set, runs on p after the stage, before p stops (untimed).
func (b *bench) driveStage(ctx context.Context, p *proc, s Stage, d drive, until func(context.Context) error, after func(context.Context, *proc) error) error {
	watch := startWatch(p)
	res, err := d.run(ctx)
	if err == nil && until != nil {
		err = until(ctx)
	}
	elapsed := watch.stop(p)
	if err == nil {
		var m scraped
		m, err = scrapeMetrics(ctx, p)
		s.GroupSizes, s.Writer, s.Worker = m.groups, m.writer, m.worker
	}
	if err == nil && after != nil {
		err = after(ctx, p)
	}
	if err != nil {
		abort(p)
		return fmt.Errorf("%s: %w", s.Name, err)
	}
	rss, err := b.l.finish(s.Name, p)
	if err != nil {
		return err
	}
	lat := summarize(res.latencies)
	s.P50Ms, s.P99Ms, s.PeakRssBytes = lat.p50, lat.p99, rss
	b.res.addStage(b.out, s, elapsed)
	return nil
}

// dispatch relays the backlog snapshot with dispatchers `outboxd
// dispatch` processes (--relay-batch batch unless 0; --partitions as
// b.partitions) into emptied streams, and returns how long it took and the
// largest peak RSS; b.startup says when every stream held an entry.
func (b *bench) dispatch(ctx context.Context, name string, dispatchers, batch int) (span, int64, error) {
	path := b.be.file(fileRun)
	if err := copySQLite(b.be.file(fileBacklog), path); err != nil {
		return span{}, 0, err
	}
	streams := b.streams()
	for _, s := range streams { // one at a time: on a cluster each in its own slot
		if err := b.be.rdb.Del(ctx, s).Err(); err != nil {
			return span{}, 0, err
		}
	}
	args := append(append([]string{"--store", storeFlag(path), "--stream", b.stream}, b.be.redisArgs()...), b.partitionFlags()...)
	if batch > 0 {
		args = append(args, "--relay-batch", strconv.Itoa(batch))
	}
	watch := startWatch()
	b.startup = startup{}
	procs, err := b.spawnReady(ctx, name, "dispatch", dispatchers, func(int) []string { return args })
	if err != nil {
		return span{}, 0, err
	}
	relayed := func(ctx context.Context) (bool, error) {
		var n int64
		started := true
		for _, s := range streams {
			l, err := b.be.rdb.XLen(ctx, s).Result()
			if err != nil {
				return false, err
			}
			n, started = n+l, started && l > 0
		}
		if started && b.startup.took == 0 {
			b.startup = startup{took: time.Since(watch.began), relayed: int(n)}
		}
		return n >= int64(b.total), nil
	}
	err = waitFor(ctx, name+": every entry in the streams", b.timeout, pollEvery, relayed, procs...)
	if err == nil {
		err = b.waitCounts(ctx, name+": no entry undispatched", path, func(c store.Counts) bool { return c.Undispatched == 0 }, procs...)
	}
	elapsed := watch.stop(procs...)
	if err != nil {
		abort(procs...)
		return span{}, 0, err
	}
	rss, err := b.l.finish(name, procs...)
	return elapsed, rss, err
}

// startup is when every stream of a dispatch run first held an entry (as
// polled): how long after the start, and how many entries they held then.
type startup struct {
	took    time.Duration
	relayed int
}

// spawnReady spawns n `outboxd role` processes named name (name-<i> when
// n > 1), process i with args(i), and waits until every one is ready.
func (b *bench) spawnReady(ctx context.Context, name, role string, n int, args func(i int) []string) ([]*proc, error) {
	procs := make([]*proc, 0, n)
	for i := range n {
		pname := name
		if n > 1 {
			pname = fmt.Sprintf("%s-%d", name, i)
		}
		p, err := b.l.spawn(pname, role, args(i)...)
		if err != nil {
			abort(procs...)
			return nil, err
		}
		procs = append(procs, p)
	}
	if err := b.l.ready(ctx, procs...); err != nil {
		return nil, err
	}
	return procs, nil
}

// partitionFlags is --partitions b.partitions when set (none otherwise:
// the roles' default, one partition).
func (b *bench) partitionFlags() []string {
	if b.partitions == 0 {
		return nil
	}
	return []string{"--partitions", strconv.Itoa(b.partitions)}
}

// streams lists the Redis streams of b.stream: one per partition (the
// stream itself when it is not split).
func (b *bench) streams() []string {
	keys := stream.NewKeys(b.stream, "").Split(b.partitions).AllPartitions()
	out := make([]string, len(keys))
	for i, k := range keys {
		out[i] = k.Stream()
	}
	return out
}

// waitCounts polls the counts of path until ok.
func (b *bench) waitCounts(ctx context.Context, what, path string, ok func(store.Counts) bool, procs ...*proc) error {
	st, err := openStore(ctx, path)
	if err != nil {
		return err
	}
	defer func() { _ = st.Close(context.Background()) }()
	return waitFor(ctx, what, b.timeout, pollEvery, func(ctx context.Context) (bool, error) {
		c, err := st.Counts(store.WithCurrentCounts(ctx))
		return err == nil && ok(c), err
	}, procs...)
}

// drained reports when group has read at least n entries of streams (in
// all) and has none pending in any: every one of them was projected and
// acknowledged.
func (b *bench) drained(group string, n int, streams ...string) func(context.Context) (bool, error) {
	return func(ctx context.Context) (bool, error) {
		var read int64
		for _, s := range streams {
			groups, err := b.be.rdb.XInfoGroups(ctx, s).Result()
			if err != nil {
				return false, err
			}
			found := false
			for _, g := range groups {
				if g.Name == group {
					if g.Pending > 0 {
						return false, nil
					}
					read, found = read+g.EntriesRead, true
				}
			}
			if !found {
				return false, nil
			}
		}
		return read >= int64(n), nil
	}
}

// work drains the streams with workers `outboxd work` processes
// (--batch-size batch unless 0; --partitions as b.partitions: each runs one
// loop per partition) on a copy of the relayed snapshot, from a new group
// at 0 into an empty read model.
func (b *bench) work(ctx context.Context, name string, workers, batch int) (span, int64, *WorkerBatches, error) {
	path := b.be.file(fileRun)
	if err := copySQLite(b.be.file(fileRelayed), path); err != nil {
		return span{}, 0, nil, err
	}
	if err := b.be.truncateReadModel(ctx); err != nil {
		return span{}, 0, nil, err
	}
	b.runs++
	group := "work-" + strconv.Itoa(b.runs)
	streams := b.streams()
	for _, s := range streams {
		if err := b.be.rdb.XGroupCreate(ctx, s, group, "0").Err(); err != nil {
			return span{}, 0, nil, err
		}
		defer b.be.rdb.XGroupDestroy(context.Background(), s, group)
	}
	watch := startWatch()
	procs, err := b.spawnReady(ctx, name, "work", workers, func(i int) []string {
		args := append(append([]string{"--store", storeFlag(path), "--postgres-url", b.be.pgURL,
			"--stream", b.stream, "--group", group, "--consumer", "c" + strconv.Itoa(i)}, b.be.redisArgs()...), b.partitionFlags()...)
		if batch > 0 {
			args = append(args, "--batch-size", strconv.Itoa(batch))
		}
		return args
	})
	if err == nil {
		err = waitFor(ctx, name+": the group drained", b.timeout, pollEvery, b.drained(group, b.total, streams...), procs...)
	}
	if err == nil {
		err = b.waitCounts(ctx, name+": every original synced", path, func(c store.Counts) bool { return c.Pending == 0 }, procs...)
	}
	elapsed := watch.stop(procs...)
	var batches *WorkerBatches
	for i := 0; err == nil && i < len(procs); i++ {
		var m scraped
		m, err = scrapeMetrics(ctx, procs[i])
		batches = batches.merge(m.worker)
	}
	if err != nil {
		abort(procs...)
		return span{}, 0, nil, err
	}
	rss, err := b.l.finish(name, procs...)
	if err != nil {
		return span{}, 0, nil, err
	}
	if err := b.be.checkReadModel(ctx, name, b.total); err != nil {
		return span{}, 0, nil, err
	}
	return elapsed, rss, batches, nil
}

// relay runs the dispatcher stage and keeps the relayed snapshot (the
// worker stages start from it).
func (b *bench) relay(ctx context.Context) error {
	d, rss, err := b.dispatch(ctx, stageDispatcher, 1, 0)
	if err != nil {
		return err
	}
	b.res.addStage(b.out, Stage{Name: stageDispatcher, Events: b.total, LimitName: limitXAdd, PeakRssBytes: rss}, d)
	if err := copySQLite(b.be.file(fileRun), b.be.file(fileRelayed)); err != nil {
		return err
	}
	return b.alternate(stageDispatcher, limitXAdd, func(name string) (span, int64, error) {
		return b.dispatch(ctx, name, 1, 0)
	})
}

// alternate is -ab on one stage: with -ab, run (the stage under name)
// -ab-runs times with each binary, alternated, as stages <stage>-a and
// <stage>-b; without it, nothing.
func (b *bench) alternate(stage, limit string, run func(name string) (span, int64, error)) error {
	if b.binB == "" {
		return nil
	}
	a := b.l.bin
	defer func() { b.l.bin = a }()
	for i := range b.abRuns {
		for _, v := range []struct{ name, bin string }{{stage + "-a", a}, {stage + "-b", b.binB}} {
			b.l.bin = v.bin
			d, rss, err := run(v.name + "-" + strconv.Itoa(i+1))
			if err != nil {
				return err
			}
			b.res.addStage(b.out, Stage{Name: v.name, Events: b.total, LimitName: limit, PeakRssBytes: rss}, d)
		}
	}
	return nil
}

// workStages runs the worker stages on the relayed snapshot (relay made
// it), and with -ab worker-1 of each binary, alternated.
func (b *bench) workStages(ctx context.Context) error {
	for _, w := range []struct {
		name    string
		workers int
	}{{stageWorker1, 1}, {stageWorker2, 2}} {
		d, rss, batches, err := b.work(ctx, w.name, w.workers, 0)
		if err != nil {
			return err
		}
		b.res.addStage(b.out, Stage{Name: w.name, Events: b.total, LimitName: limitRedisToPG, PeakRssBytes: rss, Worker: batches}, d)
	}
	return b.alternate(stageWorker1, limitRedisToPG, func(name string) (span, int64, error) {
		d, rss, _, err := b.work(ctx, name, 1, 0)
		return d, rss, err
	})
}

// startDev starts `outboxd dev` on a fresh file with a stream and group
// of its own, on an empty read model.
func (b *bench) startDev(ctx context.Context, name string, extra ...string) (p *proc, path, stream, group string, err error) {
	path, stream, group = b.be.file(name+".db"), b.be.stream(name), name
	if err = b.be.truncateReadModel(ctx); err != nil {
		return
	}
	// A stage that runs again (bench-peer's rounds) starts afresh too.
	if err = removeSQLite(path); err != nil {
		return
	}
	if err = b.be.rdb.Del(ctx, stream).Err(); err != nil {
		return
	}
	args := append([]string{"--store", storeFlag(path), "--postgres-url", b.be.pgURL, "--stream", stream, "--group", group}, b.be.redisArgs()...)
	p, err = b.l.start(ctx, name, "dev", append(args, extra...)...)
	return
}

// endToEnd posts BENCH_EVENTS in batches to `outboxd dev` and waits until
// every one is synced.
func (b *bench) endToEnd(ctx context.Context) error {
	p, path, stream, group, err := b.startDev(ctx, stageEndToEnd)
	if err != nil {
		return err
	}
	return b.driveStage(ctx, p, Stage{Name: stageEndToEnd, Events: b.n, LimitName: limitSlowestPart},
		newClient(p.url(""), "", batchClients).batches(stageEndToEnd, b.n),
		func(ctx context.Context) error { return b.waitSynced(ctx, stageEndToEnd, path, stream, group, b.n, p) }, nil)
}

// waitSynced waits until the n originals of path are synced.
func (b *bench) waitSynced(ctx context.Context, name, path, stream, group string, n int, p *proc) error {
	err := waitFor(ctx, name+": the group drained", b.timeout, pollEvery, b.drained(group, n, stream), p)
	if err != nil {
		return err
	}
	return b.waitCounts(ctx, name+": every original synced", path, func(c store.Counts) bool {
		return c.Total == int64(n) && c.Synced == int64(n)
	}, p)
}

// latency offers single events at latencyRate to `outboxd dev` and
// measures, per event, syncedAt − the start of its request.
func (b *bench) latency(ctx context.Context) error {
	p, path, stream, group, err := b.startDev(ctx, stageLatency)
	if err != nil {
		return err
	}
	n := int(latencyRate * latencyFor.Seconds())
	starts := make([]time.Time, n)
	ids := make([]string, n)
	c := newClient(p.url(""), "", latencySenders)
	d := drive{clients: latencySenders, calls: n, pace: time.Second / latencyRate, do: func(ctx context.Context, i int) (int, error) {
		starts[i] = time.Now()
		id, err := c.postEvent(ctx, stageLatency, i)
		ids[i] = id
		return 1, err
	}}
	watch := startWatch(p)
	res, err := d.run(ctx)
	busy := watch.stop(p)
	if err == nil {
		err = b.waitSynced(ctx, stageLatency, path, stream, group, n, p)
	}
	var added map[string]time.Time
	if err == nil {
		// Before the stream is trimmed (--stream-retention, 1m).
		added, err = addedTimes(ctx, b.be.rdb, stream)
	}
	var m scraped
	if err == nil {
		m, err = scrapeMetrics(ctx, p)
	}
	if err != nil {
		abort(p)
		return fmt.Errorf("%s: %w", stageLatency, err)
	}
	rss, err := b.l.finish(stageLatency, p)
	if err != nil {
		return err
	}
	b.res.notePeak(stageLatency, rss)
	ts, err := syncTimes(ctx, path, ids, starts)
	if err != nil {
		return err
	}
	lat := latencies(ts)
	s, req := summarize(lat), summarize(res.latencies)
	b.res.Latency = &Latency{OfferedEventsPerSecond: latencyRate, AchievedEventsPerSecond: perSecond(n, res.elapsed), Events: n,
		P50Ms: s.p50, P95Ms: s.p95, P99Ms: s.p99, MaxMs: s.maxValue, RequestP99Ms: req.p99, PeakRssBytes: rss, GroupSizes: m.groups, Writer: m.writer, Worker: m.worker, Histogram: latencyHistogram(lat)}
	b.res.Latency.CPUBusy = cpuBusy(busy, b.res.Cores)
	b.res.Latency.CPU = cpuPerEvent(busy, n)
	fmt.Fprintf(b.out, "  stage %-14s p50 %.1f ms, p95 %.1f ms, p99 %.1f ms ingest → syncedAt at %.0f/s offered (%.0f/s achieved), the cores %.0f%% busy\n",
		stageLatency, s.p50, s.p95, s.p99, float64(latencyRate), b.res.Latency.AchievedEventsPerSecond, 100*b.res.Latency.CPUBusy)
	printWriter(b.out, "  "+stageLatency, m.writer)
	if m.worker != nil {
		fmt.Fprintf(b.out, "  %s worker: %s\n", stageLatency, m.worker)
	}
	if b.res.Latency.Hops = hopsOf(withAdded(ts, added)); b.res.Latency.Hops != nil {
		fmt.Fprintf(b.out, "  %s %s\n", stageLatency, b.res.Latency.Hops)
	}
	return nil
}

// httpCeilingFor is how long httpCeiling posts.
const httpCeilingFor = 2 * time.Second

// httpCeiling measures limit http-refused-1 on p: singleClients post
// single events that p refuses (422, before any store call) for
// httpCeilingFor. It is the ceiling of ingest-single's request path (the
// load generator, HTTP, decoding, validation) on this machine, beside the
// store's (store-insert-1).
func (b *bench) httpCeiling(ctx context.Context, p *proc) error {
	c := newClient(p.url(""), "", singleClients)
	d := c.refused(httpCeilingFor)
	res, err := d.run(ctx)
	if err != nil {
		return fmt.Errorf("%s: %w", limitHTTP1, err)
	}
	b.res.addLimit(b.out, limitHTTP1, res.events, res.elapsed)
	return nil
}

// syncTimes reads the createdAt and syncedAt of ids from the SQLite file
// path, beside starts[i], the start of each one's request.
func syncTimes(ctx context.Context, path string, ids []string, starts []time.Time) ([]eventTimes, error) {
	st, err := openStore(ctx, path)
	if err != nil {
		return nil, err
	}
	defer func() { _ = st.Close(context.Background()) }()
	out := make([]eventTimes, 0, len(ids))
	const chunk = 1000
	for i := 0; i < len(ids); i += chunk {
		loaded, err := st.LoadEvents(ctx, ids[i:min(i+chunk, len(ids))])
		if err != nil {
			return nil, err
		}
		for j := i; j < min(i+chunk, len(ids)); j++ {
			l, ok := loaded[ids[j]]
			switch {
			case !ok:
				return nil, fmt.Errorf("%s: no original %s", stageLatency, ids[j])
			case l.Err != nil:
				return nil, fmt.Errorf("%s: original %s: %w", stageLatency, ids[j], l.Err)
			case l.Event.SyncedAt == nil:
				return nil, fmt.Errorf("%s: original %s is not synced", stageLatency, ids[j])
			}
			out = append(out, eventTimes{id: ids[j], start: starts[j], created: l.Event.CreatedAt, synced: *l.Event.SyncedAt})
		}
	}
	return out, nil
}

// latencies returns syncedAt − the request's start of each of ts.
func latencies(ts []eventTimes) []time.Duration {
	out := make([]time.Duration, len(ts))
	for i, t := range ts {
		out[i] = t.total()
	}
	return out
}

// chunkTable runs the dispatcher and worker-1 stages, and their raw
// limits, at each of b.chunks.
func (b *bench) chunkTable(ctx context.Context) error {
	for _, size := range b.chunks {
		fmt.Fprintf(b.out, "batch size %d\n", size)
		name := "batch-" + strconv.Itoa(size)
		d, drss, err := b.dispatch(ctx, stageDispatcher+"-"+name, 1, size)
		if err != nil {
			return err
		}
		w, wrss, _, err := b.work(ctx, stageWorker1+"-"+name, 1, size)
		if err != nil {
			return err
		}
		b.res.notePeak(stageDispatcher+"-"+name, drss)
		b.res.notePeak(stageWorker1+"-"+name, wrss)
		xadd, readAck, project, err := b.rawRedisAndPostgres(ctx, size, size)
		if err != nil {
			return err
		}
		raw := len(b.rawEvents)
		c := Chunk{BatchSize: size, DispatcherEventsPerSecond: perSecond(b.total, d.wall), XaddEventsPerSecond: perSecond(raw, xadd),
			WorkerEventsPerSecond:          perSecond(b.total, w.wall),
			RedisToPostgresEventsPerSecond: serial(perSecond(raw, readAck), perSecond(raw, project)),
			DispatcherPeakRssBytes:         drss, WorkerPeakRssBytes: wrss}
		c.DispatcherRatio = ratio(c.DispatcherEventsPerSecond, c.XaddEventsPerSecond)
		c.WorkerRatio = ratio(c.WorkerEventsPerSecond, c.RedisToPostgresEventsPerSecond)
		b.res.Chunks = append(b.res.Chunks, c)
		fmt.Fprintf(b.out, "  dispatcher %.0f ev/s (xadd %.0f, ratio %.2f), worker-1 %.0f ev/s (redis-to-pg %.0f, ratio %.2f)\n",
			c.DispatcherEventsPerSecond, c.XaddEventsPerSecond, c.DispatcherRatio, c.WorkerEventsPerSecond,
			c.RedisToPostgresEventsPerSecond, c.WorkerRatio)
	}
	return nil
}
