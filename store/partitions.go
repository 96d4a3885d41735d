package store

import (
	"context"
	"errors"
	"fmt"

	"github.com/outboxd/outboxd/outbox"
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
	return fmt.Sprintf("the store records %d partitions for stream %s, this component was configured with %d (its Config's Partitions; the CLI's --partitions): configure it with %d, or change the number with the procedure in %s",
		e.Recorded, e.Stream, e.Expected, e.Recorded, PartitionsProcedure)
}

// Is makes errors.Is(err, ErrPartitionsChanged) and errors.Is(err,
// outbox.ErrPartitionsMismatch) true.
func (e *PartitionsMismatchError) Is(target error) bool {
	return target == ErrPartitionsChanged || target == outbox.ErrPartitionsMismatch
}

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

// ErrNotDrained is wrapped by the error of SwitchPartitions when the
// outbox still holds undispatched entries or originals are still pending.
var ErrNotDrained = errors.New("the pipeline is not drained")

// SwitchPartitions changes the number of partitions recorded for stream to
// n, the "switch" step of the procedure (PartitionsProcedure): it refuses,
// with an error wrapping ErrNotDrained, while an outbox entry is
// undispatched or an original pending (not yet synced), since those were
// hashed into the old partitions and would be read by no one; it returns
// the number it replaced (1 when none was recorded). The figures come from
// Counts asked for current figures (WithCurrentCounts): not a cached or
// stale read. Stop ingest before: a write after the check is hashed with
// the old number.
func SwitchPartitions(ctx context.Context, st Store, stream string, n int) (int, error) {
	recorded, err := st.Partitions(ctx, stream)
	if err != nil {
		return 0, fmt.Errorf("error reading the number of partitions of stream %s: %w", stream, err)
	}
	c, err := st.Counts(WithCurrentCounts(ctx))
	if err != nil {
		return 0, fmt.Errorf("error counting the undispatched and pending: %w", err)
	}
	if c.Undispatched > 0 || c.Pending > 0 {
		return 0, fmt.Errorf("%w: %d outbox entries undispatched and %d originals pending; stop ingest, let the dispatchers and workers finish, then switch (%s)",
			ErrNotDrained, c.Undispatched, c.Pending, PartitionsProcedure)
	}
	if err := st.RecordPartitions(ctx, stream, recorded, n); err != nil {
		return 0, err
	}
	return max(recorded, 1), nil
}
