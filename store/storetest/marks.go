package storetest

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/outboxd/outboxd/store"
)

// markChecks are the checks of named timestamps.
func markChecks() []Check {
	return []Check{
		{"MarkSetOnlyForwardAndApart", checkMarks},
		{"MarkAbsentReadsTheOldLease", checkMarkLegacy},
	}
}

// checkMarks: a mark never set is nil; SetMark records a time (read back
// at millisecond precision), a later one replaces it, an earlier one
// changes nothing; marks of other names and streams are apart, and no
// lease is written.
func checkMarks(t testing.TB, h Harness) {
	b := setup(t, h, Options{})
	ctx := context.Background()
	reset, sweep := store.ResetMarkName(b.stream), store.SweepMarkName(b.stream)
	at, err := b.s.Mark(ctx, reset)
	require.NoError(t, err)
	require.Nil(t, at)

	first := t0.Add(1500 * time.Microsecond) // kept to the millisecond
	require.NoError(t, b.s.SetMark(ctx, reset, first))
	requireAt(t, t0.Add(time.Millisecond), mark(t, b.s, reset), "read back to the millisecond")
	require.NoError(t, b.s.SetMark(ctx, reset, t0.Add(time.Minute)))
	requireAt(t, t0.Add(time.Minute), mark(t, b.s, reset), "a later time replaces")
	require.NoError(t, b.s.SetMark(ctx, reset, t0))
	requireAt(t, t0.Add(time.Minute), mark(t, b.s, reset), "an earlier one does not")

	require.Nil(t, mark(t, b.s, sweep), "another name is apart")
	require.Nil(t, mark(t, b.s, store.ResetMarkName(b.stream+"-other")), "another stream is apart")
	ls, err := b.s.ReadLease(ctx, store.ResetLeaseName(b.stream)) //nolint:staticcheck // the old name must stay unwritten
	require.NoError(t, err)
	require.Nil(t, ls, "a mark is not a lease")
}

// checkMarkLegacy: a store that recorded a reset and a sweep as the
// checkpoint times of leases (before marks) still tells them while no mark
// is set; a mark, once set, wins.
func checkMarkLegacy(t testing.TB, h Harness) {
	b := setup(t, h, Options{})
	ctx := context.Background()
	for _, name := range []string{store.ResetLeaseName(b.stream), store.ReconcilerLeaseName(b.stream)} { //nolint:staticcheck // the old lease
		l, err := b.s.AcquireLease(ctx, name, "old", t0, time.Minute)
		require.NoError(t, err)
		require.NoError(t, b.s.SaveCheckpoint(ctx, l, store.Checkpoint{At: t0}))
	}
	at, err := store.LastReset(ctx, b.s, b.stream)
	require.NoError(t, err)
	requireAt(t, t0, at, "the old reset lease")
	at, err = store.LastSweep(ctx, b.s, b.stream)
	require.NoError(t, err)
	requireAt(t, t0, at, "the old reconciler checkpoint")

	require.NoError(t, store.RecordReset(ctx, b.s, b.stream, t0.Add(time.Hour)))
	at, err = store.LastReset(ctx, b.s, b.stream)
	require.NoError(t, err)
	requireAt(t, t0.Add(time.Hour), at, "the mark")
}

// mark reads mark name.
func mark(t testing.TB, s store.Store, name string) *time.Time {
	t.Helper()
	at, err := s.Mark(context.Background(), name)
	require.NoError(t, err)
	return at
}
