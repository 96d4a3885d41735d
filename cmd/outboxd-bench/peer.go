package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/outboxd/outboxd/migrations"
)

// The peer comparison (make bench-peer): outboxd and the Watermill pipeline
// of bench/peer (bin/outboxd-peer) run the same stages from outside, in
// alternating rounds.
const (
	peerEventsDefault = 20_000
	peerRoundsDefault = 3
	peerOutDefault    = "bench-peer-results.json"
	// peerSinglesMax bounds the single events of ingest-single.
	peerSinglesMax = 5_000
	systemOutboxd  = "outboxd"
	systemPeer     = "peer"
)

// peerStages are the compared stages in their order, under outboxd's names
// (the peer's relay is its Forwarder, its worker its consumer).
var peerStages = []string{stageIngestBatch, stageIngestSingle, stageDispatcher, stageWorker1, stageEndToEnd}

// PeerRound is one round's stages of one system.
type PeerRound struct {
	System string  `json:"system"`
	Round  int     `json:"round"`
	Stages []Stage `json:"stages"`
	// StreamEntries is the end-to-end stage's stream length: more than its
	// events is a duplicate relayed.
	StreamEntries int64 `json:"streamEntries"`
}

// PeerResults is bench-peer-results.json.
type PeerResults struct {
	StartedAt time.Time   `json:"startedAt"`
	Events    int         `json:"events"`
	Singles   int         `json:"singles"`
	Machine   string      `json:"machine"`
	Rounds    []PeerRound `json:"rounds"`
}

// runPeer runs the comparison.
func runPeer(ctx context.Context, out io.Writer, args []string) error {
	fs := flag.NewFlagSet("outboxd-bench peer", flag.ContinueOnError)
	bin := fs.String("bin", "bin/outboxd", "the outboxd binary (make build)")
	peerBin := fs.String("peer", "bin/outboxd-peer", "the peer's binary (bench/peer)")
	rounds := fs.Int("rounds", peerRoundsDefault, "rounds of each system, alternated")
	if err := fs.Parse(args); err != nil {
		return err
	}
	n := peerEventsDefault
	if v := os.Getenv("BENCH_EVENTS"); v != "" {
		var err error
		if n, err = strconv.Atoi(v); err != nil || n < batchEvents {
			return fmt.Errorf("BENCH_EVENTS must be a number of at least %d (got %q)", batchEvents, v)
		}
	}
	if *rounds < 1 {
		return fmt.Errorf("%w: -rounds must be at least 1 (got %d)", errUsage, *rounds)
	}
	for _, p := range []string{*bin, *peerBin} {
		if _, err := os.Stat(p); err != nil {
			return fmt.Errorf("no binary at %s (make build, make peer): %w", p, err)
		}
	}
	ll, err := parseLight()
	if err != nil {
		return err
	}
	be, err := openBackends(ctx)
	if err != nil {
		return err
	}
	defer be.close()
	if _, err := migrations.Postgres(ctx, be.pgURL); err != nil {
		return err
	}
	b := &bench{out: out, n: n, be: be, timeout: 2*time.Minute + time.Duration(n/200)*time.Second,
		l: &launcher{bin: *bin, dir: be.dir, profileDir: os.Getenv("BENCH_PROFILE")}}
	pr := &peerRun{b: b, bin: *peerBin, light: ll}
	res := &PeerResults{StartedAt: time.Now().UTC(), Events: n, Singles: min(n/4, peerSinglesMax), Machine: machine()}
	fmt.Fprintf(out, "outboxd and the Watermill peer: %d events, %d rounds alternated, on %s; logs in %s\n", n, *rounds, res.Machine, be.dir)
	for r := 1; r <= *rounds; r++ {
		order := []string{systemOutboxd, systemPeer}
		if r%2 == 0 {
			slices.Reverse(order)
		}
		for _, sys := range order {
			b.res = &Results{Events: n, Cores: runtime.NumCPU()}
			b.stream = be.stream(fmt.Sprintf("%s-%d", sys, r))
			fmt.Fprintf(out, "round %d, %s\n", r, sys)
			round := PeerRound{System: sys, Round: r}
			var err error
			if sys == systemOutboxd {
				round.StreamEntries, err = pr.outboxd(ctx, res.Singles)
			} else {
				round.StreamEntries, err = pr.peer(ctx, r, res.Singles)
			}
			if err != nil {
				return fmt.Errorf("round %d, %s: %w", r, sys, err)
			}
			round.Stages = b.res.Stages
			res.Rounds = append(res.Rounds, round)
		}
	}
	res.Print(out, ll)
	return writeResults(out, peerOutDefault, res)
}

// peerRun runs the stages of both systems.
type peerRun struct {
	b     *bench
	bin   string
	light lightLoad
}

// outboxd runs outboxd's stages: both ingest stages, the dispatcher, one
// worker, end to end and the light stage; it returns the end-to-end
// stream's length.
func (pr *peerRun) outboxd(ctx context.Context, singles int) (int64, error) {
	b := pr.b
	// b.ingest posts min(n/4, singleMax) singles; the comparison posts fewer.
	if err := b.ingestN(ctx, singles); err != nil {
		return 0, err
	}
	d, rss, err := b.dispatch(ctx, stageDispatcher, 1, 0)
	if err != nil {
		return 0, err
	}
	b.res.addStage(b.out, Stage{Name: stageDispatcher, Events: b.total, PeakRssBytes: rss}, d)
	if err := copySQLite(b.be.file(fileRun), b.be.file(fileRelayed)); err != nil {
		return 0, err
	}
	w, rss, batches, err := b.work(ctx, stageWorker1, 1, 0)
	if err != nil {
		return 0, err
	}
	b.res.addStage(b.out, Stage{Name: stageWorker1, Events: b.total, PeakRssBytes: rss, Worker: batches}, w)
	if err := b.endToEnd(ctx); err != nil {
		return 0, err
	}
	if err := b.be.checkExactlyOnce(ctx, stageEndToEnd, b.n); err != nil {
		return 0, err
	}
	entries, err := b.be.rdb.XLen(ctx, b.be.stream(stageEndToEnd)).Result()
	if err != nil {
		return 0, err
	}
	// The next round's end-to-end starts on a new stream of the same name.
	if err := b.be.rdb.Del(ctx, b.be.stream(stageEndToEnd)).Err(); err != nil {
		return 0, err
	}
	return entries, b.light(ctx)
}

// peer runs the peer's stages, named as outboxd's; round names its tables'
// topics so that no round sees another's outbox.
func (pr *peerRun) peer(ctx context.Context, round, singles int) (int64, error) {
	b := pr.b
	l := &launcher{bin: pr.bin, dir: b.be.dir}
	args := func(topic, stream string, extra ...string) []string {
		return append([]string{"--postgres-url", b.be.pgURL, "--redis-url", b.be.redisURL, "--forward-topic", topic, "--stream", stream}, extra...)
	}
	if err := pr.resetPeer(ctx); err != nil {
		return 0, err
	}
	topic := "peer_" + b.be.id + "_" + strconv.Itoa(round)
	stream := b.stream
	// Ingest: the batches, then the singles, on one process each.
	for _, s := range []struct {
		name   string
		events int
		drive  func(c *client) drive
	}{
		{stageIngestBatch, b.n, func(c *client) drive { return c.batches(stageIngestBatch, b.n) }},
		{stageIngestSingle, singles, func(c *client) drive { return c.singles(stageIngestSingle, singles) }},
	} {
		p, err := l.start(ctx, systemPeer+"-"+s.name, "ingest", args(topic, stream)...)
		if err != nil {
			return 0, err
		}
		if err := pr.drivePeer(ctx, l, p, s.name, s.events, s.drive(newClient(p.url(""), "", singleClients)), nil); err != nil {
			return 0, err
		}
	}
	total := b.n + singles
	// The relay: the Forwarder, until the stream holds every message.
	p, err := l.spawn(systemPeer+"-"+stageDispatcher, "forward", args(topic, stream)...)
	if err != nil {
		return 0, err
	}
	watch := startWatch()
	err = l.ready(ctx, p)
	if err == nil {
		err = waitFor(ctx, "peer relay: every message in the stream", b.timeout, pollEvery, func(ctx context.Context) (bool, error) {
			n, err := b.be.rdb.XLen(ctx, stream).Result()
			return n >= int64(total), err
		}, p)
	}
	if err := pr.endPeer(l, p, Stage{Name: stageDispatcher, Events: total}, watch, err); err != nil {
		return 0, err
	}
	// The consumer: from a new group at 0 into the emptied read model.
	if err := b.be.truncateReadModel(ctx); err != nil {
		return 0, err
	}
	p, err = l.spawn(systemPeer+"-"+stageWorker1, "work", args(topic, stream, "--group", "work-"+strconv.Itoa(round))...)
	if err != nil {
		return 0, err
	}
	watch = startWatch()
	err = l.ready(ctx, p)
	if err == nil {
		err = pr.waitPeerSynced(ctx, "peer worker", total, p)
	}
	if err := pr.endPeer(l, p, Stage{Name: stageWorker1, Events: total}, watch, err); err != nil {
		return 0, err
	}
	// End to end: dev on emptied tables, a new outbox topic and stream.
	if err := pr.resetPeer(ctx); err != nil {
		return 0, err
	}
	e2eStream := b.be.stream(fmt.Sprintf("peer-e2e-%d", round))
	p, err = l.start(ctx, systemPeer+"-"+stageEndToEnd, "dev", args(topic+"_e2e", e2eStream, "--group", "e2e")...)
	if err != nil {
		return 0, err
	}
	err = pr.drivePeer(ctx, l, p, stageEndToEnd, b.n, newClient(p.url(""), "", batchClients).batches(stageEndToEnd, b.n),
		func(ctx context.Context) error { return pr.waitPeerSynced(ctx, "peer end-to-end", b.n, p) })
	if err != nil {
		return 0, err
	}
	if err := b.be.checkExactlyOnce(ctx, "peer "+stageEndToEnd, b.n); err != nil {
		return 0, err
	}
	entries, err := b.be.rdb.XLen(ctx, e2eStream).Result()
	if err != nil {
		return 0, err
	}
	for _, rate := range pr.light.rates {
		if err := pr.resetPeer(ctx); err != nil {
			return 0, err
		}
		name := lightName(rate)
		p, err := l.start(ctx, systemPeer+"-"+name, "dev", args(topic+"_"+strconv.Itoa(rate), b.be.stream("peer-"+name+"-"+strconv.Itoa(round)), "--group", name)...)
		if err != nil {
			return 0, err
		}
		d, n := pacedSingles(newClient(p.url(""), "", lightSenders), name, rate, pr.light.dur)
		err = pr.drivePeer(ctx, l, p, name, n, d, func(ctx context.Context) error { return pr.waitPeerSynced(ctx, "peer "+name, n, p) })
		if err != nil {
			return 0, err
		}
	}
	return entries, nil
}

// drivePeer drives p's API, waits for until when set, and records stage
// name of n events.
func (pr *peerRun) drivePeer(ctx context.Context, l *launcher, p *proc, name string, n int, d drive, until func(context.Context) error) error {
	watch := startWatch(p)
	res, err := d.run(ctx)
	if err == nil && until != nil {
		err = until(ctx)
	}
	lat := summarize(res.latencies)
	return pr.endPeer(l, p, Stage{Name: name, Events: n, P50Ms: lat.p50, P99Ms: lat.p99}, watch, err)
}

// endPeer ends stage s of the peer, timed by watch, on its process p:
// with err, p is killed; otherwise it is stopped and s recorded.
func (pr *peerRun) endPeer(l *launcher, p *proc, s Stage, watch stopwatch, err error) error {
	sp := watch.stop(p)
	if err != nil {
		abort(p)
		return fmt.Errorf("peer %s: %w", s.Name, err)
	}
	if s.PeakRssBytes, err = l.finish(systemPeer+"-"+s.Name, p); err != nil {
		return err
	}
	pr.b.res.addStage(pr.b.out, s, sp)
	return nil
}

// waitPeerSynced waits until the peer holds n originals, every one synced.
func (pr *peerRun) waitPeerSynced(ctx context.Context, what string, n int, p *proc) error {
	return waitFor(ctx, what+": every original synced", pr.b.timeout, 20*time.Millisecond, func(ctx context.Context) (bool, error) {
		var total, synced int64
		err := pr.b.be.pg.QueryRow(ctx, `SELECT count(*), count(synced_at) FROM peer_originals`).Scan(&total, &synced)
		return err == nil && total == int64(n) && synced == total, err
	}, p)
}

// resetPeer empties the peer's originals (a process creates the table on
// its start: none may exist yet) and the read model.
func (pr *peerRun) resetPeer(ctx context.Context) error {
	if _, err := pr.b.be.pg.Exec(ctx, `DO $$ BEGIN IF to_regclass('peer_originals') IS NOT NULL THEN TRUNCATE peer_originals; END IF; END $$`); err != nil {
		return fmt.Errorf("error emptying peer_originals: %w", err)
	}
	return pr.b.be.truncateReadModel(ctx)
}

// stageOf returns the stage name of round r, and whether it ran.
func (r PeerRound) stageOf(name string) (Stage, bool) {
	for _, s := range r.Stages {
		if s.Name == name {
			return s, true
		}
	}
	return Stage{}, false
}

// Print writes the comparison: per stage the median events/s of each
// system over the rounds, the ratio of outboxd to the peer (median of the
// rounds' ratios, with their range), and the CPU per event of each.
func (res *PeerResults) Print(w io.Writer, ll lightLoad) {
	stages := slices.Clone(peerStages)
	for _, r := range ll.rates {
		stages = append(stages, lightName(r))
	}
	fmt.Fprintf(w, "\noutboxd vs the Watermill peer: %d events (%d singles), %d rounds alternated; CPU µs/event: process / PostgreSQL / Redis / machine (medians)\n\n",
		res.Events, res.Singles, len(res.Rounds)/2)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "stage\toutboxd ev/s\tpeer ev/s\tratio (median, range)\toutboxd CPU\tpeer CPU\t")
	for _, name := range stages {
		var ours, theirs, ratios []float64
		var ourCPU, theirCPU []*CPUPerEvent
		byRound := map[int]map[string]Stage{}
		for _, r := range res.Rounds {
			s, ok := r.stageOf(name)
			if !ok {
				continue
			}
			if byRound[r.Round] == nil {
				byRound[r.Round] = map[string]Stage{}
			}
			byRound[r.Round][r.System] = s
			if r.System == systemOutboxd {
				ours, ourCPU = append(ours, s.EventsPerSecond), append(ourCPU, s.CPU)
			} else {
				theirs, theirCPU = append(theirs, s.EventsPerSecond), append(theirCPU, s.CPU)
			}
		}
		for _, m := range byRound {
			if o, ok := m[systemOutboxd]; ok {
				if p, ok := m[systemPeer]; ok && p.EventsPerSecond > 0 {
					ratios = append(ratios, o.EventsPerSecond/p.EventsPerSecond)
				}
			}
		}
		label := name
		switch name {
		case stageDispatcher:
			label = "relay"
		case stageWorker1:
			label = "consumer (1 process)"
		}
		fmt.Fprintf(tw, "%s\t%.0f\t%.0f\t%s\t%s\t%s\t\n", label, median(ours), median(theirs), ratioRange(ratios), medianCPU(ourCPU), medianCPU(theirCPU))
	}
	_ = tw.Flush()
	for _, r := range res.Rounds {
		if r.StreamEntries > int64(res.Events) {
			fmt.Fprintf(w, "round %d, %s: the end-to-end stream holds %d entries for %d events (%d relayed twice)\n",
				r.Round, r.System, r.StreamEntries, res.Events, r.StreamEntries-int64(res.Events))
		}
	}
	fmt.Fprintln(w, "every round ended exactly once: each event one row in the read model, the daily counts summing to the events, every original synced")
}

// median returns the median of v (0 for none).
func median(v []float64) float64 {
	if len(v) == 0 {
		return 0
	}
	s := slices.Clone(v)
	slices.Sort(s)
	if len(s)%2 == 1 {
		return s[len(s)/2]
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
}

// ratioRange formats the median of ratios and their range: "7.0× (6.0–7.6)".
func ratioRange(ratios []float64) string {
	if len(ratios) == 0 {
		return "-"
	}
	return fmt.Sprintf("%.2f× (%.2f–%.2f)", median(ratios), slices.Min(ratios), slices.Max(ratios))
}

// medianCPU is the median of each CPU figure over the rounds.
func medianCPU(cs []*CPUPerEvent) string {
	var p, pg, rd, m []float64
	for _, c := range cs {
		if c != nil {
			p, pg, rd, m = append(p, c.Process), append(pg, c.Postgres), append(rd, c.Redis), append(m, c.Machine)
		}
	}
	if len(m) == 0 {
		return "-"
	}
	return strings.Join([]string{fmt.Sprintf("%.0f", median(p)), fmt.Sprintf("%.0f", median(pg)), fmt.Sprintf("%.0f", median(rd)), fmt.Sprintf("%.0f", median(m))}, " / ")
}
