package dispatcher

import (
	"errors"
	"sync"
	"sync/atomic"
	"time"

	"go.uber.org/zap"

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

// pressure is what the relay knows of Redis's memory beside the watch's
// verdict (maintenance.Watch.High), and the hold it implies.
type pressure struct {
	// oomAt is when an XADD was last refused for OOM (unix ns, 0: never).
	oomAt atomic.Int64

	mu   sync.Mutex
	held string // the reason of the hold the gauge and the log show
}

// Backpressure returns why the relay holds ("" when it does not):
// HoldMemoryHigh or HoldOOM, as outboxd_dispatcher_backpressure and the
// log show it. A dispatcher that does not lead never holds.
func (d *Dispatcher) Backpressure() string {
	d.pressure.mu.Lock()
	defer d.pressure.mu.Unlock()
	return d.pressure.held
}

// reason returns why the relay should hold now, from the watch's verdict
// and what the last XADD learnt of Redis's memory: HoldMemoryHigh, HoldOOM or "".
func (d *Dispatcher) reason() string {
	switch {
	case d.watch.High():
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
			d.metrics.backpressure.Set(0)
		case d.pressure.held == "":
			d.logger.Warn("redis is full; the relay holds (nothing added, marked or checkpointed) until it has room",
				zap.String("reason", reason), zap.Int("memory_high_percent", d.cfg.MemoryHigh))
			d.metrics.backpressure.Set(1)
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

// unwatched clears what the relay knew of Redis's memory and exported
// (unled); the watch clears its own figures when it stops.
func (d *Dispatcher) unwatched() {
	d.pressure.oomAt.Store(0)
	d.pressure.mu.Lock()
	d.pressure.held = ""
	d.metrics.backpressure.Set(0)
	d.pressure.mu.Unlock()
}
