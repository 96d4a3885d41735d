package store

import (
	"context"
	"errors"
	"fmt"
)

// PartitionsProcedure names the documented procedure that changes a
// stream's number of partitions (docs/operations.md, "Changing the number
// of partitions"); errors about a mismatch point there.
const PartitionsProcedure = "docs/operations.md#changing-the-number-of-partitions (outboxd partitions switch)"

// PartitionsMismatchError reports a role started with another number of
// partitions than the store records for its stream: its events would be
// hashed to partitions the rest of the deployment does not read.
type PartitionsMismatchError struct {
	Stream             string
	Recorded, Expected int
}

func (e *PartitionsMismatchError) Error() string {
	return fmt.Sprintf("the store records %d partitions for stream %s, this process was started with --partitions %d: start it with --partitions %d, or change the number with the procedure in %s",
		e.Recorded, e.Stream, e.Expected, e.Recorded, PartitionsProcedure)
}

// Is makes errors.Is(err, ErrPartitionsChanged) true.
func (e *PartitionsMismatchError) Is(target error) bool { return target == ErrPartitionsChanged }

// EnsurePartitions checks that the store records n partitions for stream;
// when it records none yet (a fresh store, or one from before partitions)
// it records n. Any other number is a *PartitionsMismatchError. Every role
// calls it at start, so two halves of a deployment never hash events
// differently.
func EnsurePartitions(ctx context.Context, st Store, stream string, n int) error {
	for range 2 {
		got, err := st.Partitions(ctx, stream)
		if err != nil {
			return fmt.Errorf("error reading the number of partitions of stream %s: %w", stream, err)
		}
		if got == n {
			return nil
		}
		if got != 0 {
			return &PartitionsMismatchError{Stream: stream, Recorded: got, Expected: n}
		}
		err = st.RecordPartitions(ctx, stream, 0, n)
		if err == nil {
			return nil
		}
		if !errors.Is(err, ErrPartitionsChanged) {
			return fmt.Errorf("error recording the number of partitions of stream %s: %w", stream, err)
		}
		// Another process recorded first: compare with its number.
	}
	return fmt.Errorf("error recording the number of partitions of stream %s: %w", stream, ErrPartitionsChanged)
}
