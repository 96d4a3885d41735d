package dispatcher

import "github.com/outboxd/outboxd/internal/fault"

// SetFaults arms cfg's fault points (tests only).
func SetFaults(cfg *Config, f *fault.Set) { cfg.faults = f }

// The dispatcher's fault points.
const (
	FaultAfterXAdd = faultAfterXAdd
	FaultAfterMark = faultAfterMark
)
