package worker

import (
	"math"
	"runtime/debug"
	rtmetrics "runtime/metrics"
	"slices"
	"sync/atomic"
	"time"
)

// autoBatchWindow is how many projections of full batches, at one batch
// size, the tuning loop looks at before it decides.
const autoBatchWindow = 20

// Tuning thresholds of the loop, as fractions of the target.
const (
	// shrinkAbove: a p95 this much over the target shrinks the batch (seed
	// 002: 30% over).
	shrinkAbove = 1.3
	// growStep is how much a batch grows at once; it grows only while the
	// p95 it predicts (the p95 × growStep) stays under growBelow × target.
	growStep  = 1.25
	growBelow = 0.8
	// timeoutShrink is the factor a lock or statement timeout applies at
	// once, and memory pressure at the end of a window.
	timeoutShrink = 0.5
	// memoryHigh is the share of the Go memory limit (GOMEMLIMIT) above
	// which the process is under memory pressure: the batch halves at the
	// end of each window and never grows.
	memoryHigh = 0.8
)

// sizing is the batch size in use: Config.BatchSize, or the size the
// tuning loop chose (Config.AutoBatch). The processor tunes it, the reader
// reads batches of it and the tail writer gathers the tails of smaller
// ones.
type sizing struct {
	n atomic.Int64
	// tune is the tuning loop, nil without AutoBatch; only the run
	// goroutine calls it (processor.tuneBatch).
	tune *autoBatch
}

// get is the batch size now.
func (s *sizing) get() int { return int(s.n.Load()) }

// autoBatch is the tuning loop as code (Config.AutoBatch): it keeps
// the 95th percentile of the projection time under a target by choosing
// the batch size between lo and hi. It looks only at full batches (at
// least half the current size): a trickle of small batches says nothing
// about the size. Only the loop goroutine that owns it calls it.
type autoBatch struct {
	lo, hi int
	target time.Duration
	size   int
	window []time.Duration
	// pressure reports memory pressure (memoryPressure).
	pressure func() bool
}

// newAutoBatch returns the loop between lo and hi, starting at start
// (clamped).
func newAutoBatch(lo, hi, start int, target time.Duration) *autoBatch {
	return &autoBatch{lo: lo, hi: hi, target: target, size: min(max(start, lo), hi), pressure: memoryPressure}
}

// memoryPressure reports whether the memory the Go runtime counts against
// its limit (GOMEMLIMIT, debug.SetMemoryLimit: everything it mapped, less
// what it released) is above memoryHigh of that limit; never without a
// limit. A batch's entries and originals are most of a worker's memory,
// so a smaller batch is the relief before the GC starts running flat out.
func memoryPressure() bool {
	limit := debug.SetMemoryLimit(-1)
	if limit <= 0 || limit == math.MaxInt64 {
		return false
	}
	s := []rtmetrics.Sample{{Name: "/memory/classes/total:bytes"}, {Name: "/memory/classes/heap/released:bytes"}}
	rtmetrics.Read(s)
	if s[0].Value.Kind() != rtmetrics.KindUint64 || s[1].Value.Kind() != rtmetrics.KindUint64 {
		return false
	}
	used := s[0].Value.Uint64() - s[1].Value.Uint64()
	return float64(used) > memoryHigh*float64(limit)
}

// observe records one projection of a batch of entries that took d
// (timedOut: it failed on a lock or statement timeout) and returns the
// batch size to use from now on.
func (a *autoBatch) observe(entries int, d time.Duration, timedOut bool) int {
	if timedOut {
		a.resize(int(float64(a.size) * timeoutShrink))
		return a.size
	}
	if entries*2 < a.size {
		return a.size
	}
	a.window = append(a.window, d)
	if len(a.window) < autoBatchWindow {
		return a.size
	}
	p95 := percentile(a.window, 0.95)
	switch {
	case a.pressure():
		a.resize(int(float64(a.size) * timeoutShrink))
	case float64(p95) > shrinkAbove*float64(a.target):
		// The time grows about linearly with the batch: aim at the target.
		a.resize(int(float64(a.size) * float64(a.target) / float64(p95)))
	case float64(p95)*growStep < growBelow*float64(a.target):
		a.resize(int(float64(a.size) * growStep))
	default:
		a.window = a.window[:0]
	}
	return a.size
}

// resize moves to size (clamped) and starts a new window.
func (a *autoBatch) resize(size int) {
	a.size = min(max(size, a.lo), a.hi)
	a.window = a.window[:0]
}

// percentile returns the q-quantile of ds (nearest rank).
func percentile(ds []time.Duration, q float64) time.Duration {
	sorted := slices.Clone(ds)
	slices.Sort(sorted)
	i := int(float64(len(sorted))*q+0.5) - 1
	return sorted[min(max(i, 0), len(sorted)-1)]
}
