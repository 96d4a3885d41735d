package status

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"math"
	"slices"
	"sync"
	"time"

	"go.uber.org/zap"

	"github.com/outboxd/outboxd/internal/bounds"
	"github.com/outboxd/outboxd/internal/startstop"
	"github.com/outboxd/outboxd/outbox"
	"github.com/outboxd/outboxd/reconciler"
	"github.com/outboxd/outboxd/worker"
)

// Defaults of HistoryConfig.
const (
	// HistoryEveryDefault is the time between two samples.
	HistoryEveryDefault = 5 * time.Second
	// HistoryEveryShortest is the shortest accepted HistoryConfig.Every:
	// each sample reads the status, which should not be read more often.
	HistoryEveryShortest = 100 * time.Millisecond
	// HistorySizeDefault is how many samples are kept: ten minutes at the
	// default pace.
	HistorySizeDefault = 120
	// historySweeps is how many reconciler sweeps are kept.
	historySweeps = 10
)

// latencyOrigins are the origins whose syncs the history's latency counts:
// the normal path and the reconciler's backstop, not operator replays,
// whose originals are as old as the window replayed (the completion SLO
// leaves them out too).
var latencyOrigins = []string{string(outbox.OriginOutbox), string(outbox.OriginReconciler)}

// HistoryConfig configures a History. A nil config means all defaults.
type HistoryConfig struct {
	// Every is the time between two samples. Defaults to
	// HistoryEveryDefault (5 seconds).
	Every time.Duration
	// Size is how many samples are kept. Defaults to HistorySizeDefault
	// (120).
	Size int
}

// History samples a Status every few seconds into a ring buffer, in this
// process: the throughput and latency of the last minutes for the console's
// charts (GET /v1/status/history), without a time-series database. Each
// process keeps its own; a restart starts it again. Its lifecycle is
// package startstop's: Start runs the sampler, Stop ends it.
type History struct {
	life   startstop.Base
	status *Status
	every  time.Duration
	logger *zap.Logger

	mu        sync.Mutex
	ring      []Sample
	next      int // where the next sample goes
	full      bool
	prev      *rawSample
	sweeps    []reconciler.Report // newest first
	lastSweep *reconciler.Report
}

// Sample is the state of the pipeline at one time, and the rates since the
// sample before. A figure that could not be read is absent.
type Sample struct {
	At time.Time `json:"at"`
	// IngestedPerSecond and SyncedPerSecond are the originals stored and
	// synced per second since the sample before (absent in the first).
	IngestedPerSecond *float64 `json:"ingestedPerSecond,omitempty"`
	SyncedPerSecond   *float64 `json:"syncedPerSecond,omitempty"`
	// Latency is the ingest → syncedAt latency of the originals this
	// process's workers synced since the sample before (absent when they
	// synced none, or the process runs no worker).
	Latency       *LatencySummary `json:"latency,omitempty"`
	Pending       *int64          `json:"pending,omitempty"`
	Failed        *int64          `json:"failed,omitempty"`
	Undispatched  *int64          `json:"undispatched,omitempty"`
	StreamLength  *int64          `json:"streamLength,omitempty"`
	StreamPending *int64          `json:"streamPending,omitempty"`
	DLQLength     *int64          `json:"dlqLength,omitempty"`
	// ReplayLength, ReplayPending and ReplayLag are the replay lane's;
	// ReplayedPerSecond the entries the group read from it per second
	// since the sample before.
	ReplayLength      *int64   `json:"replayLength,omitempty"`
	ReplayPending     *int64   `json:"replayPending,omitempty"`
	ReplayLag         *int64   `json:"replayLag,omitempty"`
	ReplayedPerSecond *float64 `json:"replayedPerSecond,omitempty"`
}

// LatencySummary sums up the latencies of one interval, read from the
// histogram's buckets (the quantiles are interpolated within a bucket, as
// PromQL's histogram_quantile does).
type LatencySummary struct {
	Count       int64   `json:"count"`
	MeanSeconds float64 `json:"meanSeconds"`
	P50Seconds  float64 `json:"p50Seconds"`
	P95Seconds  float64 `json:"p95Seconds"`
}

// HistoryPage is the answer of GET /v1/status/history.
type HistoryPage struct {
	EverySeconds float64 `json:"everySeconds"`
	// Samples are the kept samples, oldest first.
	Samples []Sample `json:"samples"`
	// Sweeps are the last sweeps of this process's reconciler, newest
	// first (none when it runs none).
	Sweeps []reconciler.Report `json:"sweeps"`
}

// rawSample is what the next sample's rates are computed from.
type rawSample struct {
	at              time.Time
	total, synced   int64
	countsOK        bool
	replayRead      int64
	replayOK        bool
	latency         histogramRead
	latencyReadable bool
}

// histogramRead is the sum of the latency histogram's series: cumulative
// counts by upper bound.
type histogramRead struct {
	count  uint64
	sum    float64
	bounds []float64
	cum    []uint64
}

// Validate checks c as NewHistory takes it (a zero field takes its
// default); each error names its field, and they are joined.
func (c *HistoryConfig) Validate() error {
	var errs []error
	if every := cmp.Or(c.Every, HistoryEveryDefault); every < HistoryEveryShortest {
		errs = append(errs, bounds.Errorf("Every", every, "must be at least %s", HistoryEveryShortest))
	}
	if size := cmp.Or(c.Size, HistorySizeDefault); size < 2 {
		errs = append(errs, bounds.Errorf("Size", size, "must be at least 2"))
	}
	return errors.Join(errs...)
}

// NewHistory returns a history of status. A nil logger logs nothing.
func NewHistory(status *Status, cfg *HistoryConfig, logger *zap.Logger) (*History, error) {
	if status == nil || status.Store == nil {
		return nil, errors.New("history: a status with a store is required")
	}
	c := HistoryConfig{}
	if cfg != nil {
		c = *cfg
	}
	c.Every = cmp.Or(c.Every, HistoryEveryDefault)
	c.Size = cmp.Or(c.Size, HistorySizeDefault)
	if err := c.Validate(); err != nil {
		return nil, fmt.Errorf("invalid history config: %w", err)
	}
	if logger == nil {
		logger = zap.NewNop()
	}
	h := &History{status: status, every: c.Every, ring: make([]Sample, c.Size),
		logger: logger.Named("history").With(zap.String("stream", status.Stream))}
	h.life.Init(nil, h.run)
	return h, nil
}

// Start runs the sampler in the background; on a running History it does
// nothing.
func (h *History) Start(ctx context.Context) error { return h.life.Start(ctx) }

// Stop ends the sampler and waits for it. It is idempotent and safe before
// Start.
func (h *History) Stop(ctx context.Context) error { return h.life.Stop(ctx) }

// Stopped is closed while the sampler is not running.
func (h *History) Stopped() <-chan struct{} { return h.life.Stopped() }

func (h *History) run(fetchCtx, _ context.Context) error {
	h.logger.Debug("history sampler started", zap.Duration("every", h.every))
	defer h.logger.Debug("history sampler stopped")
	ticker := time.NewTicker(h.every)
	defer ticker.Stop()
	for {
		h.sample(fetchCtx)
		select {
		case <-fetchCtx.Done():
			return nil
		case <-ticker.C:
		}
	}
}

// sample reads the status and this process's latency histogram once.
func (h *History) sample(ctx context.Context) {
	snap := h.status.counts(ctx, false)
	if ctx.Err() != nil {
		return
	}
	raw := &rawSample{at: h.status.now()}
	s := Sample{At: raw.at.UTC()}
	if e := snap.Events; e != nil {
		raw.total, raw.synced, raw.countsOK = e.Total, e.Synced, true
		s.Pending, s.Failed = &e.Pending, &e.Failed
		s.Undispatched = &snap.Outbox.Undispatched
	}
	if st := snap.Stream; st != nil {
		s.StreamLength, s.StreamPending = &st.Length, &st.Pending
	}
	if d := snap.DLQ; d != nil {
		s.DLQLength = &d.Length
	}
	if r := snap.Replay; r != nil {
		s.ReplayLength, s.ReplayPending, s.ReplayLag = &r.Length, &r.Pending, r.Lag
		raw.replayRead, raw.replayOK = r.Read, true
	}
	raw.latency, raw.latencyReadable = h.readLatency()

	h.mu.Lock()
	defer h.mu.Unlock()
	if p := h.prev; p != nil {
		if dt := raw.at.Sub(p.at).Seconds(); dt > 0 && p.countsOK && raw.countsOK {
			in, synced := rate(raw.total-p.total, dt), rate(raw.synced-p.synced, dt)
			s.IngestedPerSecond, s.SyncedPerSecond = &in, &synced
		}
		if dt := raw.at.Sub(p.at).Seconds(); dt > 0 && p.replayOK && raw.replayOK {
			replayed := rate(raw.replayRead-p.replayRead, dt)
			s.ReplayedPerSecond = &replayed
		}
		if raw.latencyReadable {
			// A series appears at its first observation: before, it
			// counted zero.
			s.Latency = raw.latency.since(p.latency)
		}
	}
	h.prev = raw
	h.ring[h.next] = s
	h.next = (h.next + 1) % len(h.ring)
	h.full = h.full || h.next == 0
	if h.status.LastSweep != nil {
		if rep := h.status.LastSweep(); rep != nil && rep != h.lastSweep {
			h.lastSweep = rep
			h.sweeps = append([]reconciler.Report{*rep}, h.sweeps[:min(len(h.sweeps), historySweeps-1)]...)
		}
	}
	if len(snap.Unavailable) > 0 {
		h.logger.Debug("history sample incomplete", zap.Strings("unavailable", snap.Unavailable))
	}
}

// rate is n per dt seconds, never negative (an estimated total may step
// back).
func rate(n int64, dt float64) float64 { return max(0, float64(n)/dt) }

// readLatency sums the latency histogram's series of this stream and of
// latencyOrigins; ok is false when the process has no such histogram.
func (h *History) readLatency() (histogramRead, bool) {
	var out histogramRead
	if h.status.Gatherer == nil {
		return out, false
	}
	families, err := h.status.Gatherer.Gather()
	if err != nil && len(families) == 0 {
		return out, false
	}
	found := false
	for _, f := range families {
		if f.GetName() != worker.LatencyMetric {
			continue
		}
		for _, m := range f.GetMetric() {
			labels := map[string]string{}
			for _, l := range m.GetLabel() {
				labels[l.GetName()] = l.GetValue()
			}
			hist := m.GetHistogram()
			if hist == nil || labels["stream"] != h.status.Stream || !slices.Contains(latencyOrigins, labels["origin"]) {
				continue
			}
			if !found {
				for _, b := range hist.GetBucket() {
					out.bounds = append(out.bounds, b.GetUpperBound())
				}
				out.cum = make([]uint64, len(out.bounds))
				found = true
			}
			out.count += hist.GetSampleCount()
			out.sum += hist.GetSampleSum()
			for i, b := range hist.GetBucket() {
				if i < len(out.cum) {
					out.cum[i] += b.GetCumulativeCount()
				}
			}
		}
	}
	return out, found
}

// since returns the summary of the observations after prev (nil when
// there were none).
func (r histogramRead) since(prev histogramRead) *LatencySummary {
	if r.count <= prev.count || (prev.cum != nil && len(r.cum) != len(prev.cum)) {
		return nil
	}
	n := r.count - prev.count
	cum := slices.Clone(r.cum)
	for i := range prev.cum {
		cum[i] -= min(prev.cum[i], cum[i])
	}
	return &LatencySummary{Count: int64(n), MeanSeconds: (r.sum - prev.sum) / float64(n),
		P50Seconds: quantile(0.5, r.bounds, cum, n), P95Seconds: quantile(0.95, r.bounds, cum, n)}
}

// quantile estimates the q-quantile of n observations from cumulative
// bucket counts: linear within the bucket that holds it; the highest
// finite bound when it lies beyond.
func quantile(q float64, bounds []float64, cum []uint64, n uint64) float64 {
	rank := q * float64(n)
	lower, below := 0.0, 0.0
	for i, upper := range bounds {
		c := float64(cum[i])
		if c >= rank && !math.IsInf(upper, 1) {
			if c == below {
				return upper
			}
			return lower + (upper-lower)*(rank-below)/(c-below)
		}
		lower, below = upper, c
	}
	for i := len(bounds) - 1; i >= 0; i-- {
		if !math.IsInf(bounds[i], 1) {
			return bounds[i]
		}
	}
	return 0
}

// JSON returns the page GET /v1/status/history serves
// (httpapi.Config.History).
func (h *History) JSON(context.Context) any { return h.Page() }

// Page returns the kept samples, oldest first, and the last sweeps.
func (h *History) Page() *HistoryPage {
	h.mu.Lock()
	defer h.mu.Unlock()
	page := &HistoryPage{EverySeconds: h.every.Seconds(), Samples: []Sample{}, Sweeps: slices.Clone(h.sweeps)}
	if h.full {
		page.Samples = append(page.Samples, h.ring[h.next:]...)
	}
	page.Samples = append(page.Samples, h.ring[:h.next]...)
	if page.Sweeps == nil {
		page.Sweeps = []reconciler.Report{}
	}
	return page
}
