package main

import (
	"bytes"
	"context"
	"encoding/json"
	"encoding/xml"
	"errors"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/outboxd/outboxd/store/mongostore"
)

func TestPercentile(t *testing.T) {
	t.Parallel()
	hundred := make([]time.Duration, 100)
	for i := range hundred {
		hundred[i] = time.Duration(i+1) * time.Millisecond
	}
	for _, tt := range []struct {
		name   string
		sorted []time.Duration
		p      float64
		want   time.Duration
	}{
		{"Empty", nil, 50, 0},
		{"One", []time.Duration{7}, 99, 7},
		{"MedianOfHundred", hundred, 50, 50 * time.Millisecond},
		{"P95OfHundred", hundred, 95, 95 * time.Millisecond},
		{"P99OfHundred", hundred, 99, 99 * time.Millisecond},
		{"MaxOfHundred", hundred, 100, 100 * time.Millisecond},
		{"NearestRankRoundsUp", []time.Duration{1, 2, 3}, 50, 2},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			require.Equal(t, tt.want, percentile(tt.sorted, tt.p))
		})
	}
}

func TestSummarize(t *testing.T) {
	t.Parallel()
	s := summarize([]time.Duration{4 * time.Millisecond, time.Millisecond, 3 * time.Millisecond, 2 * time.Millisecond})
	require.Equal(t, summary{n: 4, p50: 2, p95: 4, p99: 4, maxValue: 4}, s)
	require.Equal(t, summary{}, summarize(nil))
}

func TestSerial(t *testing.T) {
	t.Parallel()
	require.InDelta(t, 50.0, serial(100, 100), 1e-9)
	require.Zero(t, serial(0, 100))
}

func TestResults(t *testing.T) {
	t.Parallel()
	r := &Results{Events: 1000, Machine: "test"}
	var out bytes.Buffer
	r.addLimit(&out, limitXAdd, 1000, 100*time.Millisecond)
	r.addStage(&out, Stage{Name: stageDispatcher, Events: 1000, LimitName: limitXAdd, PeakRssBytes: 3 << 20}, span{wall: time.Second})
	r.addStage(&out, Stage{Name: stageWorker1, Events: 1000, LimitName: "not-measured", PeakRssBytes: 2 << 20}, span{wall: 2 * time.Second})

	require.Equal(t, Stage{Name: stageDispatcher, Events: 1000, Seconds: 1, EventsPerSecond: 1000, LimitName: limitXAdd,
		LimitEventsPerSecond: 10_000, Ratio: 0.1, PeakRssBytes: 3 << 20}, r.Stages[0])
	require.Zero(t, r.Stages[1].Ratio, "no limit, no ratio")
	require.Equal(t, int64(3<<20), r.PeakRssBytes)
	require.Equal(t, stageDispatcher, r.PeakRssStage)

	r.Print(&out)
	require.Contains(t, out.String(), "peak RSS 3 MiB (dispatcher)")

	path := filepath.Join(t.TempDir(), "bench-results.json")
	require.NoError(t, r.Write(path))
	b, err := os.ReadFile(path)
	require.NoError(t, err)
	var got struct {
		Stages []struct {
			Name                 string  `json:"name"`
			EventsPerSecond      float64 `json:"eventsPerSecond"`
			LimitName            string  `json:"limitName"`
			LimitEventsPerSecond float64 `json:"limitEventsPerSecond"`
			Ratio                float64 `json:"ratio"`
		} `json:"stages"`
		PeakRssBytes int64 `json:"peakRssBytes"`
	}
	require.NoError(t, json.Unmarshal(b, &got))
	require.Len(t, got.Stages, 2)
	require.Equal(t, limitXAdd, got.Stages[0].LimitName)
	require.InDelta(t, 0.1, got.Stages[0].Ratio, 1e-9)
	require.Equal(t, int64(3<<20), got.PeakRssBytes)
}

// TestCPUBound: each stage's CPU per event, and the end-to-end stage's
// rate against what its parts' CPU per event allows on the machine's
// cores.
func TestCPUBound(t *testing.T) {
	t.Parallel()
	r := &Results{Events: 1000, Machine: "test", Cores: 2}
	var out bytes.Buffer
	for _, s := range []struct {
		name string
		sp   span
	}{
		{stageIngestBatch, span{wall: time.Second, cpu: 50 * time.Millisecond}},
		{stageDispatcher, span{wall: time.Second, cpu: 10 * time.Millisecond}},
		{stageWorker1, span{wall: time.Second}}, // not measured yet
	} {
		r.addStage(&out, Stage{Name: s.name, Events: 1000}, s.sp)
	}
	require.InDelta(t, 50.0, r.Stages[0].CPUMicrosPerEvent, 1e-9)
	require.InDelta(t, 0.05, r.Stages[0].CPUSeconds, 1e-9)
	require.Zero(t, r.Stages[2].CPUMicrosPerEvent)
	require.Empty(t, r.cpuBound(), "a part without CPU time: no bound")

	r.Stages[2].CPUMicrosPerEvent = 40
	r.addStage(&out, Stage{Name: stageEndToEnd, Events: 1000}, span{wall: 100 * time.Millisecond, cpu: 120 * time.Millisecond})
	// 50 + 10 + 40 = 100 µs per event on 2 cores: 20,000/s; 10,000/s reached.
	require.Equal(t, "CPU bound of end-to-end on 2 cores: its parts use 50 (ingest-batch) + 10 (dispatcher) + 40 (worker-1) = 100 µs per event, "+
		"so at most 20000 events/s with every core busy; end-to-end used 120 µs per event and reached 10000/s, 0.50 of that bound", r.cpuBound())
	r.Print(&out)
	require.Contains(t, out.String(), "CPU µs/event")
	require.Contains(t, out.String(), "0.50 of that bound")
}

// TestMachineCPU: the machine's CPU time is read from /proc/stat and
// grows while a core works.
// TestCPUBusy: CPU time over wall time and cores.
func TestCPUBusy(t *testing.T) {
	t.Parallel()
	require.InDelta(t, 0.75, cpuBusy(span{wall: 2 * time.Second, cpu: 3 * time.Second}, 2), 1e-9)
	require.Zero(t, cpuBusy(span{}, 2), "no wall time")
	require.Zero(t, cpuBusy(span{wall: time.Second}, 2), "CPU time unread")
}

func TestMachineCPU(t *testing.T) {
	t.Parallel()
	before := machineCPU()
	if before == 0 {
		t.Skip("no /proc/stat on this system")
	}
	deadline := time.Now().Add(10 * time.Second)
	for machineCPU() <= before {
		require.True(t, time.Now().Before(deadline), "machine CPU time did not grow")
		for i := 0; i < 1_000_000; i++ { // burn a little CPU between reads
			_ = strings.Repeat("x", i%8)
		}
	}
}

func TestParseChunks(t *testing.T) {
	t.Parallel()
	got, err := parseChunks(" 250,500, 1000,2000 ")
	require.NoError(t, err)
	require.Equal(t, []int{250, 500, 1000, 2000}, got)
	got, err = parseChunks("")
	require.NoError(t, err)
	require.Empty(t, got)
	for _, bad := range []string{"0", "x", "20000"} {
		_, err := parseChunks(bad)
		require.Error(t, err, bad)
	}
}

// TestMongoCommands: the bench counts the MongoDB store's commands per path
// (on lungo here) and prints and writes the table.
func TestMongoCommands(t *testing.T) {
	t.Parallel()
	var out bytes.Buffer
	b := &bench{out: &out, res: &Results{}, be: &backends{id: newID()},
		mongoSizes: mongostore.MeasureConfig{IngestGroup: 10, WorkerBatch: 20, DispatcherBatch: 20, ReconcilerSweep: 10}}
	require.NoError(t, b.mongoCommands(context.Background()))
	require.NotEmpty(t, b.res.MongoCommands)
	lungo := b.res.MongoCommands[0]
	require.Equal(t, "lungo", lungo.Engine)
	paths := map[string]int{}
	for _, r := range lungo.Rows {
		paths[r.Path] = r.Total
		require.Positive(t, r.Total, r.Path)
	}
	require.Contains(t, paths, "ingest group")
	require.Contains(t, paths, "dispatcher batch, feed")

	b.res.Print(&out)
	require.Contains(t, out.String(), "MongoDB store, commands per path (lungo):")
	require.Contains(t, out.String(), "ingest group")
	path := filepath.Join(t.TempDir(), "bench-results.json")
	require.NoError(t, b.res.Write(path))
	raw, err := os.ReadFile(path)
	require.NoError(t, err)
	var got struct {
		MongoCommands []struct {
			Engine string `json:"engine"`
			Rows   []struct {
				Path  string `json:"path"`
				Total int    `json:"total"`
			} `json:"rows"`
		} `json:"mongoCommands"`
	}
	require.NoError(t, json.Unmarshal(raw, &got))
	require.Equal(t, "lungo", got.MongoCommands[0].Engine)
	require.Len(t, got.MongoCommands[0].Rows, len(lungo.Rows))
}

// TestParseGroupSizes reads the group commit's histogram from the text
// format of /metrics, as counts per range.
func TestParseGroupSizes(t *testing.T) {
	t.Parallel()
	const text = `# HELP outboxd_ingest_group_events Events per shared store transaction of POST /v1/events (group commit).
# TYPE outboxd_ingest_group_events histogram
outboxd_ingest_group_events_bucket{stream="s",le="1"} 10
outboxd_ingest_group_events_bucket{stream="s",le="2"} 10
outboxd_ingest_group_events_bucket{stream="s",le="4"} 25
outboxd_ingest_group_events_bucket{stream="s",le="+Inf"} 30
outboxd_ingest_group_events_sum 120
outboxd_ingest_group_events_count 30
outboxd_other_total 3
`
	g, err := parseGroupSizes(strings.NewReader(text))
	require.NoError(t, err)
	require.Equal(t, &GroupSizes{Groups: 30, Events: 120, Mean: 4, Buckets: []GroupBucket{
		{Le: "1", Groups: 10}, {Le: "2", Groups: 0}, {Le: "4", Groups: 15}, {Le: "+Inf", Groups: 5}}}, g)
	require.Equal(t, "30 groups, mean 4.0 events: ≤1 10, ≤4 15, ≤+Inf 5", g.String())

	none, err := parseGroupSizes(strings.NewReader("outboxd_other_total 3\n"))
	require.NoError(t, err)
	require.Nil(t, none, "a process without group commit")
}

// TestSVG: the chart is well-formed XML that shows every stage with its
// limit, and the latency histogram with its percentiles.
func TestSVG(t *testing.T) {
	t.Parallel()
	r := &Results{Events: 1000, Machine: "test <&> machine", StartedAt: time.Date(2026, 12, 3, 0, 0, 0, 0, time.UTC)}
	var out bytes.Buffer
	r.addLimit(&out, limitXAdd, 1000, 100*time.Millisecond)
	r.addStage(&out, Stage{Name: stageDispatcher, Events: 1000, LimitName: limitXAdd}, span{wall: time.Second})
	r.addStage(&out, Stage{Name: stageWorker1, Events: 1000, LimitName: "not-measured"}, span{wall: 2 * time.Second})
	r.Stages[len(r.Stages)-1].CPU = &CPUPerEvent{Process: 812.4, Postgres: 402, Redis: 71, Machine: 4005}
	lat := []time.Duration{500 * time.Microsecond, 3 * time.Millisecond, 4 * time.Millisecond, 40 * time.Millisecond, 9 * time.Second}
	hist := latencyHistogram(lat)
	require.Len(t, hist, len(latencyBucketsMs)+1)
	require.Equal(t, LatencyBucket{UpToMs: 1, Events: 1}, hist[0])
	require.Equal(t, LatencyBucket{UpToMs: 5, Events: 2}, hist[2])
	require.Equal(t, LatencyBucket{UpToMs: 50, Events: 1}, hist[5])
	require.Equal(t, LatencyBucket{UpToMs: 0, Events: 1}, hist[len(hist)-1], "the rest")
	r.Latency = &Latency{OfferedEventsPerSecond: 2000, AchievedEventsPerSecond: 1990, Events: len(lat), P50Ms: 4, P99Ms: 9000, Histogram: hist}

	svg := r.SVG()
	dec := xml.NewDecoder(bytes.NewReader(svg))
	var texts []string
	for {
		tok, err := dec.Token()
		if errors.Is(err, io.EOF) {
			break
		}
		require.NoError(t, err, "well-formed:\n%s", svg)
		if c, ok := tok.(xml.CharData); ok {
			texts = append(texts, string(c))
		}
	}
	all := strings.Join(texts, "\n")
	require.Contains(t, all, "test <&> machine")
	require.Contains(t, all, stageDispatcher)
	require.Contains(t, all, "1,000 of 10,000 ev/s (redis-xadd), ratio 0.10")
	require.Contains(t, all, stageWorker1)
	require.Contains(t, all, "CPU µs/event: process 812 · PostgreSQL 402 · Redis 71 · machine 4,005")
	require.Equal(t, 1, strings.Count(all, "CPU µs/event:"), "only the stage whose CPU was measured")
	require.Contains(t, all, "p50 4.0 ms")
	require.Contains(t, all, "p99 9000.0 ms")
	require.Contains(t, all, ">5s")

	path := filepath.Join(t.TempDir(), "bench-results.svg")
	require.NoError(t, r.WriteSVG(path))
	b, err := os.ReadFile(path)
	require.NoError(t, err)
	require.Equal(t, svg, b)
}
