package outbox

import (
	"hash/fnv"

	"github.com/outboxd/outboxd/internal/bounds"
)

// Bounds of the number of partitions (--partitions).
const (
	// PartitionsDefault is the number of partitions of a stream unless
	// configured: one, which keeps every key and document name of a
	// deployment from before partitions.
	PartitionsDefault = 1
	// PartitionsMax is the most partitions a stream may have.
	PartitionsMax = 1024
)

// ValidatePartitions checks a number of partitions (1 to PartitionsMax);
// its error names the field Partitions.
func ValidatePartitions(n int) error {
	if n < 1 || n > PartitionsMax {
		return bounds.Errorf("Partitions", n, "must be between 1 and %d", PartitionsMax)
	}
	return nil
}

// PartitionOf returns the partition (0 ≤ p < n) of the events of one
// device: FNV-1a (32 bits) of sourceKey, a zero byte and deviceKey, modulo
// n. It is stable across versions and processes (a stored entry keeps the
// partition it was written with, and every ingest of one deployment must
// agree), so it must never change; n ≤ 1 gives 0.
func PartitionOf(sourceKey, deviceKey string, n int) int {
	if n <= 1 {
		return 0
	}
	h := fnv.New32a()
	_, _ = h.Write([]byte(sourceKey))
	_, _ = h.Write([]byte{0})
	_, _ = h.Write([]byte(deviceKey))
	return int(h.Sum32() % uint32(n))
}
