package dispatcher

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap"

	ometrics "github.com/outboxd/outboxd/internal/metrics"
	"github.com/outboxd/outboxd/internal/stream"
)

// Reasons of a hold, as Backpressure returns them.
const (
	// HoldMemoryHigh: Redis's used_memory is at or above MemoryHigh % of
	// its maxmemory.
	HoldMemoryHigh = "memory_high"
	// HoldOOM: Redis refused an XADD ("OOM command not allowed").
	HoldOOM = "oom"
)

// errBackpressure is the error of an XADD the dispatcher did not send
// because Redis is full.
var errBackpressure = errors.New("redis is full; holding the relay")

// pressure is what the leader's watch (watch) knows of Redis's memory, and
// the hold it implies for the relay.
type pressure struct {
	// high is set while used_memory is at or above the high-water mark;
	// oomAt is when an XADD was last refused for OOM (unix ns, 0: never).
	high  atomic.Bool
	oomAt atomic.Int64

	mu   sync.Mutex
	held string // the reason of the hold the gauge and the log show
}

// watchMetrics are the figures of the stream and of Redis that the leader's
// watch exports.
type watchMetrics struct {
	lag, read    *prometheus.GaugeVec
	trimmed      prometheus.Counter
	used, max    prometheus.Gauge
	backpressure prometheus.Gauge
}

func newWatchMetrics(reg prometheus.Registerer, name string) (*watchMetrics, error) {
	sf := ometrics.NewFactory(reg, "stream", name)
	rf := ometrics.NewFactory(reg, "redis", name)
	df := ometrics.NewFactory(reg, metricsSubsystem, name)
	m := &watchMetrics{
		lag:          sf.GaugeVec("lag", "Entries of the stream a consumer group has not read yet (XINFO GROUPS lag; absent when Redis cannot tell).", "group"),
		read:         sf.GaugeVec("entries_read", "Entries of the stream a consumer group has read since it was created (XINFO GROUPS entries-read).", "group"),
		trimmed:      sf.Counter("trimmed_total", "Acknowledged entries trimmed from the stream and its replay lane (below the lowest id any consumer group still needs, past --stream-retention)."),
		used:         rf.Gauge("used_memory_bytes", "Redis's used_memory (INFO memory), as the dispatcher's leader last read it."),
		max:          rf.Gauge("maxmemory_bytes", "Redis's maxmemory (0: no limit)."),
		backpressure: df.Gauge(backpressureName, "1 while the relay holds because Redis is full (used_memory above --redis-memory-high of maxmemory, or an OOM reply): nothing is added, marked or checkpointed."),
	}
	return m, errors.Join(sf.Err(), rf.Err(), df.Err())
}

// Backpressure returns why the relay holds ("" when it does not):
// HoldMemoryHigh or HoldOOM, as outboxd_dispatcher_backpressure and the
// log show it. A dispatcher that does not lead never holds.
func (d *Dispatcher) Backpressure() string {
	d.pressure.mu.Lock()
	defer d.pressure.mu.Unlock()
	return d.pressure.held
}

// reason returns why the relay should hold now, from what the watch and
// the last XADD learnt of Redis's memory: HoldMemoryHigh, HoldOOM or "".
func (d *Dispatcher) reason() string {
	switch {
	case d.pressure.high.Load():
		return HoldMemoryHigh
	case time.Since(time.Unix(0, d.pressure.oomAt.Load())) < d.cfg.TrimInterval:
		return HoldOOM
	}
	return ""
}

// hold returns errBackpressure while Redis is full, and shows the hold (or
// its end) in the gauge and the log.
func (d *Dispatcher) hold() error {
	reason := d.reason()
	d.pressure.mu.Lock()
	defer d.pressure.mu.Unlock()
	if reason != d.pressure.held {
		switch {
		case reason == "":
			d.logger.Info("redis has room again; relaying")
			d.watchMetrics.backpressure.Set(0)
		case d.pressure.held == "":
			d.logger.Warn("redis is full; the relay holds (nothing added, marked or checkpointed) until it has room",
				zap.String("reason", reason), zap.Int("memory_high_percent", d.cfg.MemoryHigh))
			d.watchMetrics.backpressure.Set(1)
		}
		d.pressure.held = reason
	}
	if reason != "" {
		return errBackpressure
	}
	return nil
}

// refused records an XADD that Redis refused for lack of memory.
func (d *Dispatcher) refused(err error) {
	if stream.IsOOM(err) {
		d.pressure.oomAt.Store(time.Now().UnixNano())
		_ = d.hold()
	}
}

// startWatch runs the leader's watch in the background until ctx ends or
// the returned stop is called.
func (d *Dispatcher) startWatch(ctx context.Context) (stop func()) {
	ctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() {
		defer close(done)
		d.watch(ctx)
	}()
	return func() { cancel(); <-done }
}

// unwatched clears what the watch learnt and exported (unled).
func (d *Dispatcher) unwatched() {
	d.pressure.high.Store(false)
	d.pressure.oomAt.Store(0)
	d.pressure.mu.Lock()
	d.pressure.held = ""
	d.watchMetrics.backpressure.Set(0)
	d.pressure.mu.Unlock()
	d.watchMetrics.used.Set(0)
	d.watchMetrics.max.Set(0)
	d.watchMetrics.lag.Reset()
	d.watchMetrics.read.Reset()
}

// watch is the leader's housekeeping of Redis, every TrimInterval: it
// trims what every consumer group has acknowledged (stream.Client.Trim),
// reads Redis's memory (the hold of the relay above MemoryHigh) and the
// groups' lag, and exports them. It runs apart from the relay, so that it
// goes on trimming, and freeing memory, while the relay holds.
func (d *Dispatcher) watch(ctx context.Context) {
	t := time.NewTicker(d.cfg.TrimInterval)
	defer t.Stop()
	keys := d.keys()
	for {
		d.watchOnce(ctx, keys)
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// watchOnce is one round of watch; a failure is logged at debug level (the
// relay reports Redis's outages) and the next round tries again.
func (d *Dispatcher) watchOnce(ctx context.Context, keys stream.Keys) {
	if mem, err := d.rc.Memory(ctx); err == nil {
		d.watchMetrics.used.Set(float64(mem.Used))
		d.watchMetrics.max.Set(float64(mem.Max))
		d.pressure.high.Store(mem.Above(d.cfg.MemoryHigh))
		_ = d.hold()
	} else if ctx.Err() == nil {
		d.logger.Debug("error reading redis's memory", zap.Error(err))
	}
	if !d.cfg.TrimOff {
		trims, err := d.rc.Trim(ctx, keys, d.cfg.StreamRetention)
		for _, t := range trims {
			d.watchMetrics.trimmed.Add(float64(t.Entries))
			d.trimmed.Add(t.Entries)
		}
		if err != nil && ctx.Err() == nil {
			d.logger.Debug("error trimming the stream", zap.Error(err))
		}
	}
	lags, err := d.rc.Lags(ctx, keys)
	if err != nil {
		if ctx.Err() == nil {
			d.logger.Debug("error reading the consumer groups' lag", zap.Error(err))
		}
		return
	}
	for _, l := range lags {
		if l.Key != keys.Stream() {
			continue // the replay lane's figures are the status's
		}
		d.watchMetrics.read.WithLabelValues(l.Group).Set(float64(l.Read))
		if l.Lag != nil {
			d.watchMetrics.lag.WithLabelValues(l.Group).Set(float64(*l.Lag))
		} else {
			d.watchMetrics.lag.DeleteLabelValues(l.Group)
		}
	}
}
