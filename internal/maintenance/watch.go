package maintenance

import (
	"context"
	"errors"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap"

	ometrics "github.com/outboxd/outboxd/internal/metrics"
	"github.com/outboxd/outboxd/internal/startstop"
	"github.com/outboxd/outboxd/internal/stream"
)

// WatchMetrics are the figures of the stream and of Redis that a Watch
// exports; they are registered once (NewWatchMetrics) and shared by the
// watch's runs.
type WatchMetrics struct {
	lag, read *prometheus.GaugeVec
	trimmed   prometheus.Counter
	used, max prometheus.Gauge
}

// NewWatchMetrics registers the watch's metrics of stream name on reg
// (none when nil).
func NewWatchMetrics(reg prometheus.Registerer, name string) (*WatchMetrics, error) {
	sf := ometrics.NewFactory(reg, "stream", name)
	rf := ometrics.NewFactory(reg, "redis", name)
	m := &WatchMetrics{
		lag:     sf.GaugeVec("lag", "Entries of the stream a consumer group has not read yet (XINFO GROUPS lag; absent when Redis cannot tell).", "group"),
		read:    sf.GaugeVec("entries_read", "Entries of the stream a consumer group has read since it was created (XINFO GROUPS entries-read).", "group"),
		trimmed: sf.Counter("trimmed_total", "Acknowledged entries trimmed from the stream and its replay lane (below the lowest id any consumer group still needs, past --stream-retention)."),
		used:    rf.Gauge("used_memory_bytes", "Redis's used_memory (INFO memory), as the dispatcher's leader last read it."),
		max:     rf.Gauge("maxmemory_bytes", "Redis's maxmemory (0: no limit)."),
	}
	return m, errors.Join(sf.Err(), rf.Err())
}

// WatchConfig configures a Watch.
type WatchConfig struct {
	// Client reaches Redis.
	Client *stream.Client
	// Keys are the stream's (or partition's) keys.
	Keys stream.Keys
	// Interval is the time between two rounds; the first runs at Start.
	Interval time.Duration
	// StreamRetention is how long an acknowledged entry stays in the
	// stream (stream.Client.Trim).
	StreamRetention time.Duration
	// TrimOff turns trimming off.
	TrimOff bool
	// MemoryHigh is the high-water mark of Redis's memory, in percent of
	// its maxmemory: the verdict (High) is set at or above it.
	MemoryHigh int
	// Metrics receive the figures (NewWatchMetrics).
	Metrics *WatchMetrics
	// Verdict, when set, is called after each read of Redis's memory, once
	// High tells the new verdict (the relay's hold shows it).
	Verdict func()
	// Logger logs the rounds' failures at debug level (the relay reports
	// Redis's outages). Defaults to none.
	Logger *zap.Logger
}

// Watch is the service that, every Interval, trims what every consumer
// group has acknowledged, reads Redis's memory (its verdict: High) and the
// groups' lag, and exports them. It runs apart from the relay, so that it
// goes on trimming, and freeing memory, while the relay holds.
type Watch struct {
	cfg     WatchConfig
	high    atomic.Bool
	trimmed atomic.Int64
	base    startstop.Base
}

// NewWatch returns the watch of cfg.
func NewWatch(cfg WatchConfig) *Watch {
	if cfg.Logger == nil {
		cfg.Logger = zap.NewNop()
	}
	w := &Watch{cfg: cfg}
	w.base.Init(nil, runEvery(cfg.Interval, true, w.Round))
	return w
}

// High is the watch's verdict: Redis's used_memory was at or above
// MemoryHigh % of its maxmemory when last read. A stopped watch says
// false.
func (w *Watch) High() bool { return w.high.Load() }

// Trimmed counts the entries the watch trimmed since NewWatch.
func (w *Watch) Trimmed() int64 { return w.trimmed.Load() }

// Start runs a round at once, then every Interval, until Stop or the end
// of ctx.
func (w *Watch) Start(ctx context.Context) {
	_ = w.base.Start(ctx) // no preflight: it cannot fail
}

// Stop ends the rounds, waits for the one in flight and clears what the
// watch learnt and exported: the verdict, Redis's memory, the groups' lag.
func (w *Watch) Stop() {
	_ = w.base.Stop(context.Background())
	w.high.Store(false)
	w.cfg.Metrics.used.Set(0)
	w.cfg.Metrics.max.Set(0)
	w.cfg.Metrics.lag.Reset()
	w.cfg.Metrics.read.Reset()
}

// Round is one round of the watch; a failure is logged at debug level and
// the next round tries again.
func (w *Watch) Round(ctx context.Context) {
	m, keys := w.cfg.Metrics, w.cfg.Keys
	if mem, err := w.cfg.Client.Memory(ctx); err == nil {
		m.used.Set(float64(mem.Used))
		m.max.Set(float64(mem.Max))
		w.high.Store(mem.Above(w.cfg.MemoryHigh))
		if w.cfg.Verdict != nil {
			w.cfg.Verdict()
		}
	} else if ctx.Err() == nil {
		w.cfg.Logger.Debug("error reading redis's memory", zap.Error(err))
	}
	if !w.cfg.TrimOff {
		trims, err := w.cfg.Client.Trim(ctx, keys, w.cfg.StreamRetention)
		for _, t := range trims {
			m.trimmed.Add(float64(t.Entries))
			w.trimmed.Add(t.Entries)
		}
		if err != nil && ctx.Err() == nil {
			w.cfg.Logger.Debug("error trimming the stream", zap.Error(err))
		}
	}
	lags, err := w.cfg.Client.Lags(ctx, keys)
	if err != nil {
		if ctx.Err() == nil {
			w.cfg.Logger.Debug("error reading the consumer groups' lag", zap.Error(err))
		}
		return
	}
	for _, l := range lags {
		if l.Key != keys.Stream() {
			continue // the replay lane's figures are the status's
		}
		m.read.WithLabelValues(l.Group).Set(float64(l.Read))
		if l.Lag != nil {
			m.lag.WithLabelValues(l.Group).Set(float64(*l.Lag))
		} else {
			m.lag.DeleteLabelValues(l.Group)
		}
	}
}
