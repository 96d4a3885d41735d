package reconciler

import "github.com/outboxd/outboxd/internal/fault"

// SetFaults arms cfg's fault points (tests only).
func SetFaults(cfg *Config, f *fault.Set) { cfg.faults = f }

// SetBeforeRollback runs hook after a failed publish, before its rollback
// (tests only).
func SetBeforeRollback(cfg *Config, hook func(id string)) { cfg.beforeRollback = hook }

// The reconciler's fault points.
const (
	FaultAfterClaim = faultAfterClaim
	FaultRollback   = faultRollback
)
