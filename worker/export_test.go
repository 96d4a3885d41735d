package worker

import "github.com/outboxd/outboxd/internal/fault"

// SetFaults arms cfg's fault points (tests only).
func SetFaults(cfg *Config, f *fault.Set) { cfg.faults = f }

// The worker's fault points.
const (
	FaultAfterCommit   = faultAfterCommit
	FaultAfterSyncedAt = faultAfterSyncedAt
)
