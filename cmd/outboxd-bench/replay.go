package main

import (
	"bytes"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"text/tabwriter"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/outboxd/outboxd/internal/stream"
	"github.com/outboxd/outboxd/outbox"
	"github.com/outboxd/outboxd/store"
)

// Defaults of the replay run (a 100,000-event replay while
// single events are posted).
const (
	replayEventsDefault   = 100_000
	replayLiveRateDefault = 500
	replayBaseline        = 30 * time.Second
	replayOutDefault      = "replay-results.json"
	// replayChunk is the replay command's --chunk.
	replayChunk = 5000
	// replayAfter is how long live events are still posted after a
	// replay's last entry was acknowledged (its tail is part of "during").
	replayAfter = 2 * time.Second
	// replaySource is the source of the replayed originals.
	replaySource = "history"
)

// ReplayPhase is the live events' ingest → syncedAt latency in one phase of
// the replay run, and the replay's duration when the phase has one.
type ReplayPhase struct {
	Name       string  `json:"name"`
	LiveEvents int     `json:"liveEvents"`
	P50Ms      float64 `json:"p50Ms"`
	P95Ms      float64 `json:"p95Ms"`
	P99Ms      float64 `json:"p99Ms"`
	MaxMs      float64 `json:"maxMs"`
	// ReplaySeconds is from the replay's start until its last entry was
	// acknowledged; ReplayEventsPerSecond the replayed originals per
	// second over it.
	ReplaySeconds         float64 `json:"replaySeconds,omitempty"`
	ReplayEventsPerSecond float64 `json:"replayEventsPerSecond,omitempty"`
}

// ReplayResults is replay-results.json.
type ReplayResults struct {
	StartedAt            time.Time     `json:"startedAt"`
	Machine              string        `json:"machine"`
	Replayed             int           `json:"replayed"`
	LiveEventsPerSecond  int           `json:"liveEventsPerSecond"`
	ReplayRate           string        `json:"replayRate"`
	DevFlags             string        `json:"devFlags"`
	Phases               []ReplayPhase `json:"phases"`
	ReplayCommandOutput  string        `json:"replayCommandOutput"`
	StatusDuringTheLane  string        `json:"statusDuringTheLane"`
	ReplayLaneAfterwards string        `json:"replayLaneAfterwards"`
}

// runReplay is `outboxd-bench replay`: outboxd dev (bin/outboxd, SQLite
// store) holds REPLAY_EVENTS synced originals; single events are posted at
// REPLAY_LIVE_RATE a second throughout, and the live events' ingest →
// syncedAt latency is measured in three phases: before any replay, while
// `outboxd replay` re-publishes the originals through the replay lane, and
// while the same messages go into the stream itself (what a replay did
// before the lane).
func runReplay(ctx context.Context, out io.Writer, args []string) error {
	fs := flag.NewFlagSet("outboxd-bench replay", flag.ContinueOnError)
	bin := fs.String("bin", "bin/outboxd", "the outboxd binary (make build)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	n, err := intEnv("REPLAY_EVENTS", replayEventsDefault, batchEvents)
	if err != nil {
		return err
	}
	liveRate, err := intEnv("REPLAY_LIVE_RATE", replayLiveRateDefault, 1)
	if err != nil {
		return err
	}
	baseline, err := durationEnv("REPLAY_BASELINE", replayBaseline)
	if err != nil {
		return err
	}
	replayRate := env("", "REPLAY_RATE") // --replay-rate of dev; "" its default
	b, err := newRun(ctx, out, *bin, n)
	if err != nil {
		return err
	}
	be := b.be
	defer be.close()
	res := &ReplayResults{StartedAt: time.Now().UTC(), Machine: machine(), Replayed: n, LiveEventsPerSecond: liveRate,
		ReplayRate: replayRate}
	if res.ReplayRate == "" {
		res.ReplayRate = "5000 (the default)"
	}
	var extra []string
	if replayRate != "" {
		extra = append(extra, "--replay-rate", replayRate)
	}
	extra = append(extra, strings.Fields(os.Getenv("REPLAY_DEV_FLAGS"))...) // --concurrency 2, say
	res.DevFlags = strings.Join(extra, " ")
	fmt.Fprintf(out, "replay lane: %d originals replayed while single events are posted at %d/s; %s; logs in %s\n",
		n, liveRate, res.Machine, be.dir)

	p, path, name, group, err := b.startDev(ctx, "replay-lane", extra...)
	if err != nil {
		return err
	}
	r := &replayRun{b: b, p: p, path: path, keys: stream.NewKeys(name, group), rate: liveRate, bin: *bin, baseline: baseline}
	err = r.run(ctx, res)
	if err != nil {
		abort(p)
		return err
	}
	if _, err := b.l.finish("replay-lane", p); err != nil {
		return err
	}
	printReplay(out, res)
	return writeResults(out, replayOutDefault, res)
}

// replayRun is one run of the replay measurement against one dev process.
type replayRun struct {
	b    *bench
	p    *proc
	path string
	keys stream.Keys
	rate int
	bin  string
	// baseline is the length of the phase without a replay.
	baseline time.Duration
	// live counts the live events posted so far (their indexes).
	live int
}

// seed posts the originals a replay re-publishes and waits until they are
// synced.
func (r *replayRun) seed(ctx context.Context) error {
	b := r.b
	fmt.Fprintf(b.out, "  seeding %d originals (source %s)…\n", b.n, replaySource)
	c := newClient(r.p.url(""), "", batchClients)
	d := c.batches(replaySource, b.n)
	if _, err := d.run(ctx); err != nil {
		return err
	}
	return b.waitSynced(ctx, "seed", r.path, r.keys.Stream(), r.keys.Group(), b.n, r.p)
}

// replay runs `outboxd replay` over every seeded original, in chunks of
// chunk, its output into out.
func (r *replayRun) replay(ctx context.Context, chunk int, out *bytes.Buffer) error {
	from, to := eventBase, eventBase.Add(time.Duration(r.b.n)*time.Second)
	cmd := exec.CommandContext(ctx, r.bin, "replay", "--server", r.p.url(""), "--from", from.Format(time.RFC3339), //nolint:gosec // the harness's own binary and flags
		"--to", to.Format(time.RFC3339), "--source", replaySource, "--chunk", strconv.Itoa(chunk))
	cmd.Stdout, cmd.Stderr = out, out
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("outboxd replay: %w: %s", err, out.String())
	}
	return nil
}

func (r *replayRun) run(ctx context.Context, res *ReplayResults) error {
	b := r.b
	if err := r.seed(ctx); err != nil {
		return err
	}

	before, err := r.phase(ctx, "before: no replay", func(ctx context.Context) (time.Duration, error) {
		return 0, sleepFor(ctx, r.baseline)
	})
	if err != nil {
		return err
	}
	res.Phases = append(res.Phases, before)

	var cmdOut bytes.Buffer
	lane, err := r.phase(ctx, "during: outboxd replay, through the replay lane", func(ctx context.Context) (time.Duration, error) {
		started := time.Now()
		if err := r.replay(ctx, replayChunk, &cmdOut); err != nil {
			return 0, err
		}
		status, _ := exec.CommandContext(ctx, r.bin, "status", "--server", r.p.url("")).CombinedOutput() //nolint:gosec // as above
		res.StatusDuringTheLane = string(status)
		err := waitFor(ctx, "the replay lane drained", b.timeout, pollEvery, r.drained(r.keys.Replay(), b.n), r.p)
		return time.Since(started), err
	})
	if err != nil {
		return err
	}
	res.ReplayCommandOutput = cmdOut.String()
	res.Phases = append(res.Phases, lane)
	status, _ := exec.CommandContext(ctx, r.bin, "status", "--server", r.p.url("")).CombinedOutput() //nolint:gosec // as above
	res.ReplayLaneAfterwards = string(status)

	old, err := r.phase(ctx, "during: the same messages into the stream (no lane, as before)", func(ctx context.Context) (time.Duration, error) {
		started := time.Now()
		if err := r.publishIntoTheStream(ctx); err != nil {
			return 0, err
		}
		err := waitFor(ctx, "the stream drained", b.timeout, pollEvery, r.drained(r.keys.Stream(), 0), r.p)
		return time.Since(started), err
	})
	if err != nil {
		return err
	}
	res.Phases = append(res.Phases, old)
	return nil
}

// phase posts live single events at r.rate while during runs (and
// replayAfter longer when it replays), waits until they are synced, and
// returns their latencies.
func (r *replayRun) phase(ctx context.Context, name string, during func(context.Context) (time.Duration, error)) (ReplayPhase, error) {
	fmt.Fprintf(r.b.out, "  %s…\n", name)
	ph := ReplayPhase{Name: name}
	sendCtx, stopSending := context.WithCancel(ctx)
	defer stopSending()
	var (
		mu     sync.Mutex
		starts []time.Time
		ids    []string
		first  = r.live
	)
	c := newClient(r.p.url(""), "", latencySenders)
	source := "live"
	sent := make(chan error, 1)
	go func() {
		d := drive{clients: latencySenders, duration: 24 * time.Hour, pace: time.Second / time.Duration(r.rate),
			do: func(ctx context.Context, i int) (int, error) {
				began := time.Now()
				id, err := c.postEvent(ctx, source, first+i)
				if err == nil {
					mu.Lock()
					starts, ids = append(starts, began), append(ids, id)
					mu.Unlock()
				}
				return 1, err
			}}
		_, err := d.run(sendCtx)
		sent <- err
	}()
	took, err := during(ctx)
	if err == nil && took > 0 {
		err = sleepFor(ctx, replayAfter)
	}
	stopSending()
	if serr := <-sent; err == nil && serr != nil && !errors.Is(serr, context.Canceled) {
		err = serr
	}
	if err != nil {
		return ph, fmt.Errorf("%s: %w", name, err)
	}
	mu.Lock()
	defer mu.Unlock()
	r.live = first + len(ids) + latencySenders // cancelled calls may have taken an index
	if err := r.b.waitCounts(ctx, name+": the live events synced", r.path, func(c store.Counts) bool {
		return c.Pending == 0
	}, r.p); err != nil {
		return ph, err
	}
	ts, err := syncTimes(ctx, r.path, ids, starts)
	if err != nil {
		return ph, err
	}
	s := summarize(latencies(ts))
	ph.LiveEvents, ph.P50Ms, ph.P95Ms, ph.P99Ms, ph.MaxMs = s.n, s.p50, s.p95, s.p99, s.maxValue
	if took > 0 {
		ph.ReplaySeconds, ph.ReplayEventsPerSecond = took.Seconds(), perSecond(r.b.n, took)
	}
	fmt.Fprintf(r.b.out, "    %d live events: p50 %.1f ms, p95 %.1f ms, p99 %.1f ms, max %.1f ms\n", s.n, s.p50, s.p95, s.p99, s.maxValue)
	return ph, nil
}

// drained reports when the group has read at least n entries of key (0:
// every entry) and holds none pending.
func (r *replayRun) drained(key string, n int) func(context.Context) (bool, error) {
	return func(ctx context.Context) (bool, error) {
		info, err := r.b.be.rdb.XInfoStream(ctx, key).Result()
		if err != nil {
			return false, err
		}
		groups, err := r.b.be.rdb.XInfoGroups(ctx, key).Result()
		if err != nil {
			return false, err
		}
		for _, g := range groups {
			if g.Name == r.keys.Group() {
				read := g.EntriesRead >= int64(n)
				if n == 0 {
					read = g.LastDeliveredID == info.LastGeneratedID
				}
				return read && g.Pending == 0, nil
			}
		}
		return false, nil
	}
}

// publishIntoTheStream XADDs a replay message of every replayed original
// into the stream itself, in pipelines of 1,000, as a replay did before the
// replay lane.
func (r *replayRun) publishIntoTheStream(ctx context.Context) error {
	st, err := openStore(ctx, r.path)
	if err != nil {
		return err
	}
	defer func() { _ = st.Close(context.Background()) }()
	q := store.EventQuery{By: store.ByOccurred, From: eventBase, To: eventBase.Add(time.Duration(r.b.n) * time.Second),
		SourceKey: replaySource, State: store.StateAny, Limit: 1000}
	for {
		page, err := st.ListEvents(ctx, q)
		if err != nil {
			return err
		}
		_, err = r.b.be.rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
			for _, ev := range page {
				p.XAdd(ctx, &redis.XAddArgs{Stream: r.keys.Stream(), Values: ev.Message(outbox.OriginReplay).Values()})
			}
			return nil
		})
		if err != nil || len(page) < q.Limit {
			return err
		}
		q.After = q.CursorOf(page[len(page)-1])
	}
}

// printReplay prints the phases as a table, then the replay command's
// output and the status it saw.
func printReplay(w io.Writer, res *ReplayResults) {
	fmt.Fprintf(w, "\nlive single events at %d/s, ingest → syncedAt (ms), %d originals replayed (--replay-rate %s; dev flags %q):\n",
		res.LiveEventsPerSecond, res.Replayed, res.ReplayRate, res.DevFlags)
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "phase\tlive events\tp50\tp95\tp99\tmax\treplay took\treplay rate\t")
	for _, p := range res.Phases {
		took, rate := "-", "-"
		if p.ReplaySeconds > 0 {
			took, rate = fmt.Sprintf("%.1f s", p.ReplaySeconds), fmt.Sprintf("%.0f/s", p.ReplayEventsPerSecond)
		}
		fmt.Fprintf(tw, "%s\t%d\t%.1f\t%.1f\t%.1f\t%.1f\t%s\t%s\t\n", p.Name, p.LiveEvents, p.P50Ms, p.P95Ms, p.P99Ms, p.MaxMs, took, rate)
	}
	_ = tw.Flush()
	fmt.Fprintf(w, "\n$ outboxd replay --from … --to … --source %s --chunk %d\n%s", replaySource, replayChunk, indent(res.ReplayCommandOutput))
	fmt.Fprintf(w, "\n$ outboxd status   (during the replay)\n%s", indent(res.StatusDuringTheLane))
	fmt.Fprintf(w, "\n$ outboxd status   (after it)\n%s", indent(res.ReplayLaneAfterwards))
}

func indent(s string) string {
	var b strings.Builder
	for line := range strings.SplitSeq(strings.TrimRight(s, "\n"), "\n") {
		b.WriteString("  " + line + "\n")
	}
	return b.String()
}

// sleepFor waits d (the length of a phase, not synchronisation) or until
// ctx ends.
func sleepFor(ctx context.Context, d time.Duration) error {
	if !sleepUntil(ctx, time.Now().Add(d)) {
		return ctx.Err()
	}
	return nil
}

// intEnv reads the integer variable name (def when unset), at least lo.
func intEnv(name string, def, lo int) (int, error) {
	v := os.Getenv(name)
	if v == "" {
		return def, nil
	}
	n, err := strconv.Atoi(v)
	if err != nil || n < lo {
		return 0, fmt.Errorf("%s must be a number of at least %d (got %q)", name, lo, v)
	}
	return n, nil
}
