package main

import (
	"bytes"
	"context"
	"flag"
	"fmt"
	"io"
	"strconv"
	"text/tabwriter"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/outboxd/outboxd/internal/stream"
)

// Defaults of the chunk exercise.
const (
	chunksDefault       = "500,1000,2000"
	chunksEventsDefault = 50_000
	chunksOutDefault    = "chunks-results.json"
	// lockSampleEvery is how often pg_stat_activity is sampled for
	// backends waiting on a lock.
	lockSampleEvery = 5 * time.Millisecond
)

// ChunkRun is one row of the chunk exercise: a replay of every seeded
// original at one chunk size.
type ChunkRun struct {
	Chunk int `json:"chunk"`
	// ReplayCommandSeconds is the replay command's own time (counting the
	// window and publishing it to the lane); RecoverySeconds is from its
	// start until the lane's last entry was acknowledged: the window is
	// synced again.
	ReplayCommandSeconds float64 `json:"replayCommandSeconds"`
	RecoverySeconds      float64 `json:"recoverySeconds"`
	EventsPerSecond      float64 `json:"eventsPerSecond"`
	// LockWaitShare is the share of samples of the run's active
	// PostgreSQL backends that waited on a lock (wait_event_type Lock),
	// sampled every 5 ms while the replay ran.
	LockWaitShare float64 `json:"lockWaitShare"`
	LockSamples   int     `json:"lockSamples"`
	// LiveP99Ms is the p99 of the live single events' ingest → syncedAt
	// while the replay ran.
	LiveP99Ms float64 `json:"liveP99Ms"`
}

// ChunkResults is chunks-results.json.
type ChunkResults struct {
	StartedAt           time.Time  `json:"startedAt"`
	Machine             string     `json:"machine"`
	Replayed            int        `json:"replayed"`
	LiveEventsPerSecond int        `json:"liveEventsPerSecond"`
	Runs                []ChunkRun `json:"runs"`
}

// runChunks is `outboxd-bench chunks`, the recovery exercise at growing
// chunk sizes (REPLAY_CHUNKS, default 500,1000,2000): for each size, a
// fresh `outboxd dev` (SQLite store) with --batch-size and --replay-rate 0
// holds REPLAY_EVENTS synced originals (default 50,000) whose rows the
// read model then loses (a failed window), and `outboxd replay --chunk
// SIZE` re-publishes all of them while single events are posted at
// REPLAY_LIVE_RATE; the run fails unless the read model holds each of them
// once, counted once, at the end. Each row: the replay command's time, the
// recovery time (until the lane is drained), the lock-wait share of the
// PostgreSQL backends, and the live events' p99.
func runChunks(ctx context.Context, out io.Writer, args []string) error {
	fs := flag.NewFlagSet("outboxd-bench chunks", flag.ContinueOnError)
	bin := fs.String("bin", "bin/outboxd", "the outboxd binary (make build)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	sizes, err := parseChunks(env(chunksDefault, "REPLAY_CHUNKS"))
	if err != nil {
		return err
	}
	n, err := intEnv("REPLAY_EVENTS", chunksEventsDefault, batchEvents)
	if err != nil {
		return err
	}
	liveRate, err := intEnv("REPLAY_LIVE_RATE", replayLiveRateDefault, 1)
	if err != nil {
		return err
	}
	b, err := newRun(ctx, out, *bin, n)
	if err != nil {
		return err
	}
	defer b.be.close()
	res := &ChunkResults{StartedAt: time.Now().UTC(), Machine: machine(), Replayed: n, LiveEventsPerSecond: liveRate}
	fmt.Fprintf(out, "chunk exercise: %d originals replayed at chunk sizes %v while single events are posted at %d/s; %s; logs in %s\n",
		n, sizes, liveRate, res.Machine, b.be.dir)
	for _, size := range sizes {
		row, err := chunkRun(ctx, b, *bin, size, liveRate)
		if err != nil {
			return err
		}
		res.Runs = append(res.Runs, row)
	}
	printChunks(out, res)
	return writeResults(out, chunksOutDefault, res)
}

// chunkRun measures one chunk size on a dev process of its own.
func chunkRun(ctx context.Context, b *bench, bin string, size, liveRate int) (ChunkRun, error) {
	row := ChunkRun{Chunk: size}
	name := "chunk-" + strconv.Itoa(size)
	fmt.Fprintf(b.out, "chunk %d\n", size)
	p, path, streamName, group, err := b.startDev(ctx, name, "--batch-size", strconv.Itoa(size), "--replay-rate", "0")
	if err != nil {
		return row, err
	}
	r := &replayRun{b: b, p: p, path: path, keys: stream.NewKeys(streamName, group), rate: liveRate, bin: bin}
	if err := r.seed(ctx); err != nil {
		abort(p)
		return row, err
	}
	// The failed window: the read model lost every seeded row (the
	// originals are synced and say nothing), so the replay projects them
	// all again, their daily counts included, beside the live events.
	if err := b.be.truncateReadModel(ctx); err != nil {
		abort(p)
		return row, err
	}
	var cmdOut bytes.Buffer
	ph, err := r.phase(ctx, fmt.Sprintf("replay --chunk %d", size), func(ctx context.Context) (time.Duration, error) {
		s := startLockSampler(ctx, b.be.pg, b.be.dbName)
		defer func() { row.LockWaitShare, row.LockSamples = s.stop() }()
		started := time.Now()
		if err := r.replay(ctx, size, &cmdOut); err != nil {
			return 0, err
		}
		row.ReplayCommandSeconds = time.Since(started).Seconds()
		err := waitFor(ctx, "the replay lane drained", b.timeout, pollEvery, r.drained(r.keys.Replay(), b.n), r.p)
		return time.Since(started), err
	})
	if err != nil {
		abort(p)
		return row, err
	}
	if _, err := b.l.finish(name, p); err != nil {
		return row, err
	}
	var restored, counted int64
	if err := b.be.pg.QueryRow(ctx, `SELECT (SELECT count(*) FROM events WHERE source_key = $1),
		(SELECT coalesce(sum(event_count), 0) FROM device_daily_stats WHERE source_key = $1)`, replaySource).Scan(&restored, &counted); err != nil {
		return row, err
	}
	if restored != int64(b.n) || counted != int64(b.n) {
		return row, fmt.Errorf("chunk %d: the replay restored %d rows counted %d times, not %d", size, restored, counted, b.n)
	}
	row.RecoverySeconds, row.EventsPerSecond, row.LiveP99Ms = ph.ReplaySeconds, ph.ReplayEventsPerSecond, ph.P99Ms
	fmt.Fprintf(b.out, "  replay command %.1f s, recovery %.1f s (%.0f/s), lock-wait share %.2f%% of %d samples, live p99 %.1f ms\n",
		row.ReplayCommandSeconds, row.RecoverySeconds, row.EventsPerSecond, 100*row.LockWaitShare, row.LockSamples, row.LiveP99Ms)
	return row, nil
}

// lockSampler counts, every lockSampleEvery, the active client backends
// of one database and those of them waiting on a lock. Only its goroutine
// writes the counts; stop reads them after it ended.
type lockSampler struct {
	cancel       context.CancelFunc
	done         chan struct{}
	active, lock int
	samples      int
}

func startLockSampler(ctx context.Context, pool *pgxpool.Pool, db string) *lockSampler {
	ctx, cancel := context.WithCancel(ctx)
	s := &lockSampler{cancel: cancel, done: make(chan struct{})}
	go func() {
		defer close(s.done)
		t := time.NewTicker(lockSampleEvery)
		defer t.Stop()
		for {
			var active, lock int
			err := pool.QueryRow(ctx, `SELECT count(*), count(*) FILTER (WHERE wait_event_type = 'Lock')
				FROM pg_stat_activity
				WHERE datname = $1 AND state = 'active' AND backend_type = 'client backend' AND pid <> pg_backend_pid()`, db).Scan(&active, &lock)
			if err == nil {
				s.active, s.lock, s.samples = s.active+active, s.lock+lock, s.samples+1
			}
			select {
			case <-ctx.Done():
				return
			case <-t.C:
			}
		}
	}()
	return s
}

// stop ends the sampling and returns the share of active backends seen
// waiting on a lock, and the number of samples.
func (s *lockSampler) stop() (float64, int) {
	s.cancel()
	<-s.done
	if s.active == 0 {
		return 0, s.samples
	}
	return float64(s.lock) / float64(s.active), s.samples
}

// printChunks prints the exercise as the table docs/benchmarks.md keeps.
func printChunks(w io.Writer, res *ChunkResults) {
	fmt.Fprintf(w, "\n%d originals replayed, live single events at %d/s:\n", res.Replayed, res.LiveEventsPerSecond)
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "chunk\treplay command\trecovery\trecovered/s\tlock-wait share\tlive p99\t")
	for _, r := range res.Runs {
		fmt.Fprintf(tw, "%d\t%.1f s\t%.1f s\t%.0f\t%.2f%%\t%.1f ms\t\n", r.Chunk, r.ReplayCommandSeconds, r.RecoverySeconds,
			r.EventsPerSecond, 100*r.LockWaitShare, r.LiveP99Ms)
	}
	_ = tw.Flush()
}
