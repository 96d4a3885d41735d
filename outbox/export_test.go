package outbox

import (
	"time"

	"github.com/outboxd/outboxd/internal/fault"
)

// SetFaults arms cfg's fault points (tests only).
func SetFaults(cfg *WriterConfig, f *fault.Set) { cfg.faults = f }

// Queued returns how many requests wait in c's queue (tests only).
func Queued(c *Committer) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.queue)
}

// FaultBetweenInserts is the Writer's fault point (faultBetweenInserts).
const FaultBetweenInserts = faultBetweenInserts

// HashedDerivedKey is the derived key of the three fields in its form up
// to 0.1.0 (hashedDerivedKey).
func HashedDerivedKey(sourceKey, deviceKey string, occurredAt time.Time) string {
	return hashedDerivedKey(derivedSum(sourceKey, deviceKey, occurredAt.UTC().Truncate(time.Millisecond)))
}
