package main

import (
	"encoding/json"
	"fmt"
	"io"
	"math"
	"os"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/outboxd/outboxd/store/mongostore"
)

// Limit is the measured raw rate of one part.
type Limit struct {
	Name            string  `json:"name"`
	EventsPerSecond float64 `json:"eventsPerSecond"`
}

// Stage is the figure of one stage of outboxd against the limit it is
// bound by.
type Stage struct {
	Name                 string  `json:"name"`
	Events               int     `json:"events"`
	Seconds              float64 `json:"seconds"`
	EventsPerSecond      float64 `json:"eventsPerSecond"`
	LimitName            string  `json:"limitName"`
	LimitEventsPerSecond float64 `json:"limitEventsPerSecond"`
	Ratio                float64 `json:"ratio"`
	// P50Ms and P99Ms are request latencies (ingest stages only).
	P50Ms        float64 `json:"p50Ms,omitempty"`
	P99Ms        float64 `json:"p99Ms,omitempty"`
	PeakRssBytes int64   `json:"peakRssBytes"`
	// CPUSeconds is the CPU time the whole machine used during the stage
	// (every process: outboxd, Redis, PostgreSQL, the bench's clients),
	// and CPUMicrosPerEvent that per event; 0 where /proc/stat is not
	// read.
	CPUSeconds        float64 `json:"cpuSeconds,omitempty"`
	CPUMicrosPerEvent float64 `json:"cpuMicrosPerEvent,omitempty"`
	// CPU is the CPU time per event split by process (nil where /proc is
	// not read).
	CPU *CPUPerEvent `json:"cpu,omitempty"`
	// GroupSizes is the group commit's histogram (stages that post).
	GroupSizes *GroupSizes `json:"groupSizes,omitempty"`
	// Writer is the SQLite store's writer by role (stages that post).
	Writer []WriterRole `json:"writer,omitempty"`
	// Worker is the workers' batches and PostgreSQL transactions (the
	// worker stages).
	Worker *WorkerBatches `json:"worker,omitempty"`
}

// CPUPerEvent is a stage's CPU time per event, in µs, by whom: the stage's
// own processes (outboxd's, or the peer's), every PostgreSQL process, Redis,
// the harness (its load generator), and the whole machine (every process;
// what the others leave is the rest of the machine).
type CPUPerEvent struct {
	Process  float64 `json:"process"`
	Postgres float64 `json:"postgres"`
	Redis    float64 `json:"redis"`
	Harness  float64 `json:"harness"`
	Machine  float64 `json:"machine"`
}

// cpuPerEvent divides sp's CPU times by n events (nil when the machine's
// could not be read).
func cpuPerEvent(sp span, n int) *CPUPerEvent {
	if sp.cpu <= 0 || n <= 0 {
		return nil
	}
	per := func(d time.Duration) float64 { return float64(d.Microseconds()) / float64(n) }
	return &CPUPerEvent{Process: per(sp.proc), Postgres: per(sp.postgres), Redis: per(sp.redis), Harness: per(sp.harness), Machine: per(sp.cpu)}
}

// String is the figures as "process / postgres / redis / machine µs".
func (c *CPUPerEvent) String() string {
	if c == nil {
		return "-"
	}
	return fmt.Sprintf("%.0f / %.0f / %.0f / %.0f", c.Process, c.Postgres, c.Redis, c.Machine)
}

// Latency is ingest → syncedAt at a steady offered load.
type Latency struct {
	OfferedEventsPerSecond float64 `json:"offeredEventsPerSecond"`
	// AchievedEventsPerSecond is the rate the senders kept up.
	AchievedEventsPerSecond float64 `json:"achievedEventsPerSecond"`
	Events                  int     `json:"events"`
	P50Ms                   float64 `json:"p50Ms"`
	P95Ms                   float64 `json:"p95Ms"`
	P99Ms                   float64 `json:"p99Ms"`
	MaxMs                   float64 `json:"maxMs"`
	// RequestP99Ms is the p99 of the POST requests themselves.
	RequestP99Ms float64 `json:"requestP99Ms"`
	PeakRssBytes int64   `json:"peakRssBytes"`
	// GroupSizes is the group commit's histogram.
	GroupSizes *GroupSizes `json:"groupSizes,omitempty"`
	// Writer is the SQLite store's writer by role.
	Writer []WriterRole `json:"writer,omitempty"`
	// Worker is the worker's batches.
	Worker *WorkerBatches `json:"worker,omitempty"`
	// Histogram counts the events by latency range (the chart's).
	Histogram []LatencyBucket `json:"histogram"`
	// Hops is ingest → syncedAt split by the pipeline's hops.
	Hops *Hops `json:"hops,omitempty"`
	// CPUBusy is the share of the machine's cores busy while the events
	// were posted (/proc/stat, every process); 0 where it cannot be read.
	// Near 1 the tail is the scheduler's.
	CPUBusy float64 `json:"cpuBusy,omitempty"`
	// CPU is the CPU time per event while the events were posted.
	CPU *CPUPerEvent `json:"cpu,omitempty"`
}

// Chunk is the dispatcher and one worker at one batch size.
type Chunk struct {
	BatchSize                      int     `json:"batchSize"`
	DispatcherEventsPerSecond      float64 `json:"dispatcherEventsPerSecond"`
	XaddEventsPerSecond            float64 `json:"xaddEventsPerSecond"`
	DispatcherRatio                float64 `json:"dispatcherRatio"`
	WorkerEventsPerSecond          float64 `json:"workerEventsPerSecond"`
	RedisToPostgresEventsPerSecond float64 `json:"redisToPostgresEventsPerSecond"`
	WorkerRatio                    float64 `json:"workerRatio"`
	DispatcherPeakRssBytes         int64   `json:"dispatcherPeakRssBytes"`
	WorkerPeakRssBytes             int64   `json:"workerPeakRssBytes"`
}

// Results is bench-results.json.
type Results struct {
	StartedAt   time.Time `json:"startedAt"`
	WallSeconds float64   `json:"wallSeconds"`
	Events      int       `json:"events"`
	Machine     string    `json:"machine"`
	// Cores is the number of CPUs the machine's processes share.
	Cores        int      `json:"cores"`
	Limits       []Limit  `json:"limits"`
	Stages       []Stage  `json:"stages"`
	Latency      *Latency `json:"latency,omitempty"`
	Chunks       []Chunk  `json:"chunks,omitempty"`
	PeakRssBytes int64    `json:"peakRssBytes"`
	PeakRssStage string   `json:"peakRssStage"`
	// MongoCommands are the MongoDB store's commands per path: on lungo,
	// then on a replica set when one was given.
	MongoCommands []mongostore.CommandTable `json:"mongoCommands,omitempty"`
}

// limit returns the rate of the limit name (0 when it was not measured).
func (r *Results) limit(name string) float64 {
	for _, l := range r.Limits {
		if l.Name == name {
			return l.EventsPerSecond
		}
	}
	return 0
}

// addLimit records a raw limit and prints it.
func (r *Results) addLimit(w io.Writer, name string, n int, d time.Duration) float64 {
	rate := perSecond(n, d)
	r.Limits = append(r.Limits, Limit{Name: name, EventsPerSecond: rate})
	fmt.Fprintf(w, "  limit %-18s %10.0f ev/s  (%d in %s)\n", name, rate, n, d.Round(time.Millisecond))
	return rate
}

// addStage records a stage against its limit and prints it.
func (r *Results) addStage(w io.Writer, s Stage, sp span) {
	d := sp.wall
	s.Seconds = d.Seconds()
	s.EventsPerSecond = perSecond(s.Events, d)
	if sp.cpu > 0 && s.Events > 0 {
		s.CPUSeconds = sp.cpu.Seconds()
		s.CPUMicrosPerEvent = s.CPUSeconds * 1e6 / float64(s.Events)
		s.CPU = cpuPerEvent(sp, s.Events)
	}
	s.LimitEventsPerSecond = r.limit(s.LimitName)
	s.Ratio = ratio(s.EventsPerSecond, s.LimitEventsPerSecond)
	r.Stages = append(r.Stages, s)
	r.notePeak(s.Name, s.PeakRssBytes)
	against := ""
	if s.LimitEventsPerSecond > 0 {
		against = fmt.Sprintf(", ratio %.2f to %s", s.Ratio, s.LimitName)
	}
	fmt.Fprintf(w, "  stage %-14s %10.0f ev/s  (%d in %s)%s, peak RSS %s, CPU µs/event process / PostgreSQL / Redis / machine %s\n",
		s.Name, s.EventsPerSecond, s.Events, d.Round(time.Millisecond), against, mib(s.PeakRssBytes), s.CPU)
}

// transactionRate says how fast the workers of stage s projected while
// in their PostgreSQL transactions (events ÷ the transactions' time) beside
// pg-project, measured with the raw limits: a worker stage that keeps
// PostgreSQL busy all along is as fast as PostgreSQL is during the stage,
// which on a shared machine drifts from the raw run, and the share of the
// stage spent in transactions tells the one from the other.
func (r *Results) transactionRate(s Stage) string {
	if s.Worker == nil || s.Worker.ProjectionTotalS <= 0 || s.Seconds <= 0 {
		return "no transaction timed"
	}
	rate := float64(s.Events) / s.Worker.ProjectionTotalS
	return fmt.Sprintf("%.0f%% of the stage in transactions (summed over the workers), %.0f ev/s of transaction time, %.2f of %s",
		100*s.Worker.ProjectionTotalS/s.Seconds, rate, ratio(rate, r.limit(limitProject)), limitProject)
}

// notePeak keeps the largest peak RSS and the stage it belongs to.
func (r *Results) notePeak(stage string, rss int64) {
	if rss > r.PeakRssBytes {
		r.PeakRssBytes, r.PeakRssStage = rss, stage
	}
}

// Print writes the tables.
func (r *Results) Print(w io.Writer) {
	fmt.Fprintf(w, "\noutboxd benchmark: %d events, %s, %s wall\n\n", r.Events, r.Machine,
		(time.Duration(r.WallSeconds * float64(time.Second))).Round(time.Second))
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "raw limit\tevents/s\t")
	for _, l := range r.Limits {
		fmt.Fprintf(tw, "%s\t%.0f\t\n", l.Name, l.EventsPerSecond)
	}
	_ = tw.Flush()
	fmt.Fprintln(w)
	tw = tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "stage\tevents\tseconds\tevents/s\tlimit\tlimit/s\tratio\treq p50 ms\treq p99 ms\tCPU µs/event: process / PostgreSQL / Redis / machine\tpeak RSS\t")
	for _, s := range r.Stages {
		fmt.Fprintf(tw, "%s\t%d\t%.2f\t%.0f\t%s\t%.0f\t%.2f\t%s\t%s\t%s\t%s\t\n", s.Name, s.Events, s.Seconds,
			s.EventsPerSecond, s.LimitName, s.LimitEventsPerSecond, s.Ratio, ms(s.P50Ms), ms(s.P99Ms), s.CPU, mib(s.PeakRssBytes))
	}
	_ = tw.Flush()
	if line := r.cpuBound(); line != "" {
		fmt.Fprintln(w, line)
	}
	for _, s := range r.Stages {
		if s.GroupSizes != nil {
			fmt.Fprintf(w, "%s group commit: %s\n", s.Name, s.GroupSizes)
		}
		printWriter(w, s.Name, s.Writer)
		if s.Worker != nil {
			fmt.Fprintf(w, "%s worker: %s; %s\n", s.Name, s.Worker, r.transactionRate(s))
		}
	}
	if l := r.Latency; l != nil {
		fmt.Fprintf(w, "\ningest → syncedAt at %.0f/s offered (%.0f/s achieved, %d events): p50 %.1f ms, p95 %.1f ms, p99 %.1f ms, max %.1f ms; request p99 %.1f ms; peak RSS %s; the cores %.0f%% busy; CPU µs/event process / PostgreSQL / Redis / machine %s\n",
			l.OfferedEventsPerSecond, l.AchievedEventsPerSecond, l.Events, l.P50Ms, l.P95Ms, l.P99Ms, l.MaxMs, l.RequestP99Ms, mib(l.PeakRssBytes), 100*l.CPUBusy, l.CPU)
		if l.GroupSizes != nil {
			fmt.Fprintf(w, "latency group commit: %s\n", l.GroupSizes)
		}
		printWriter(w, "latency", l.Writer)
		if l.Worker != nil {
			fmt.Fprintf(w, "latency worker: %s\n", l.Worker)
		}
		if l.Hops != nil {
			fmt.Fprintf(w, "latency %s\n", l.Hops)
		}
	}
	if len(r.Chunks) > 0 {
		fmt.Fprintln(w)
		tw = tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
		fmt.Fprintln(tw, "batch\tdispatcher/s\txadd/s\tratio\tworker-1/s\tredis-to-pg/s\tratio\t")
		for _, c := range r.Chunks {
			fmt.Fprintf(tw, "%d\t%.0f\t%.0f\t%.2f\t%.0f\t%.0f\t%.2f\t\n", c.BatchSize, c.DispatcherEventsPerSecond,
				c.XaddEventsPerSecond, c.DispatcherRatio, c.WorkerEventsPerSecond, c.RedisToPostgresEventsPerSecond, c.WorkerRatio)
		}
		_ = tw.Flush()
	}
	fmt.Fprintf(w, "\npeak RSS %s (%s)\n", mib(r.PeakRssBytes), r.PeakRssStage)
	for _, t := range r.MongoCommands {
		fmt.Fprintf(w, "\nMongoDB store, commands per path (%s):\n", t.Engine)
		tw = tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
		fmt.Fprintln(tw, "path\tevents\tcommands\ttotal\t")
		for _, row := range t.Rows {
			fmt.Fprintf(tw, "%s\t%d\t%s\t%d\t\n", row.Path, row.Events, row.CommandList(), row.Total)
		}
		_ = tw.Flush()
	}
}

// cpuBound says what the end-to-end stage could reach if the machine's
// cores did nothing but its parts' work (ingest-batch, dispatcher,
// worker-1, each measured alone as CPU time per event, every process of the
// machine counted), and how near it came: on one machine the parts do not
// run beside each other on cores of their own, so their CPU per event adds
// up. "" when a figure is missing.
func (r *Results) cpuBound() string {
	cpu := map[string]float64{}
	rate := map[string]float64{}
	for _, s := range r.Stages {
		cpu[s.Name], rate[s.Name] = s.CPUMicrosPerEvent, s.EventsPerSecond
	}
	parts := []string{stageIngestBatch, stageDispatcher, stageWorker1}
	var sum float64
	terms := make([]string, len(parts))
	for i, p := range parts {
		if cpu[p] <= 0 {
			return ""
		}
		sum += cpu[p]
		terms[i] = fmt.Sprintf("%.0f (%s)", cpu[p], p)
	}
	e2e := cpu[stageEndToEnd]
	if e2e <= 0 || r.Cores <= 0 {
		return ""
	}
	bound := float64(r.Cores) * 1e6 / sum
	return fmt.Sprintf("CPU bound of end-to-end on %d cores: its parts use %s = %.0f µs per event, so at most %.0f events/s with every core busy; end-to-end used %.0f µs per event and reached %.0f/s, %.2f of that bound",
		r.Cores, strings.Join(terms, " + "), sum, bound, e2e, rate[stageEndToEnd], ratio(rate[stageEndToEnd], bound))
}

// Write writes the results as JSON to path.
func (r *Results) Write(path string) error { return writeJSON(path, r) }

// writeJSON writes v as indented JSON to path.
func writeJSON(path string, v any) error {
	b, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		return err
	}
	if err := os.WriteFile(path, append(b, '\n'), 0o644); err != nil {
		return fmt.Errorf("error writing %s: %w", path, err)
	}
	return nil
}

// writeResults writes v as JSON to BENCH_OUT, or to def, and says where.
func writeResults(out io.Writer, def string, v any) error {
	path := env(def, "BENCH_OUT")
	if err := writeJSON(path, v); err != nil {
		return err
	}
	fmt.Fprintf(out, "results in %s\n", path)
	return nil
}

// percentile returns the p-th percentile (0 < p ≤ 100) of sorted by the
// nearest-rank method; 0 for none.
func percentile(sorted []time.Duration, p float64) time.Duration {
	if len(sorted) == 0 {
		return 0
	}
	rank := int(math.Ceil(p / 100 * float64(len(sorted))))
	return sorted[min(max(rank, 1), len(sorted))-1]
}

// summary holds the percentiles of a set of durations, in milliseconds.
type summary struct {
	n                       int
	p50, p95, p99, maxValue float64
}

// summarize sorts d and returns its percentiles.
func summarize(d []time.Duration) summary {
	slices.Sort(d)
	s := summary{n: len(d)}
	if len(d) == 0 {
		return s
	}
	s.p50, s.p95, s.p99 = msOf(percentile(d, 50)), msOf(percentile(d, 95)), msOf(percentile(d, 99))
	s.maxValue = msOf(d[len(d)-1])
	return s
}

func msOf(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

func perSecond(n int, d time.Duration) float64 {
	if d <= 0 {
		return 0
	}
	return float64(n) / d.Seconds()
}

func ratio(a, b float64) float64 {
	if b == 0 {
		return 0
	}
	return a / b
}

// serial is the rate of doing a and then b for every event.
func serial(a, b float64) float64 {
	if a == 0 || b == 0 {
		return 0
	}
	return 1 / (1/a + 1/b)
}

func ms(v float64) string {
	if v == 0 {
		return "-"
	}
	return fmt.Sprintf("%.1f", v)
}

func mib(b int64) string {
	if b == 0 {
		return "-"
	}
	return fmt.Sprintf("%.0f MiB", float64(b)/(1<<20))
}
