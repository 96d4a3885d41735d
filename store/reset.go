package store

import (
	"context"
	"fmt"
	"time"
)

// RecordReset records in st that stream's consumer group was created anew
// at now (the mark ResetMarkName): the originals created before it that
// are not synced may have been lost with Redis's data, and the reconciler
// takes them at once, whatever their age (LastReset).
func RecordReset(ctx context.Context, st Store, stream string, now time.Time) error {
	if err := st.SetMark(ctx, ResetMarkName(stream), now); err != nil {
		return fmt.Errorf("error recording the reset of stream %q: %w", stream, err)
	}
	return nil
}

// LastReset returns when stream's consumer group was last created anew
// (RecordReset), or nil when never.
func LastReset(ctx context.Context, st Store, stream string) (*time.Time, error) {
	return LastMark(ctx, st, ResetMarkName(stream), ResetLeaseName(stream))
}

// RecordReplayCancel records in st that an operator cancelled, at now,
// every replay of stream that began before (the mark
// ReplayCancelMarkName): a chunk of one is refused (LastReplayCancel).
func RecordReplayCancel(ctx context.Context, st Store, stream string, now time.Time) error {
	if err := st.SetMark(ctx, ReplayCancelMarkName(stream), now); err != nil {
		return fmt.Errorf("error recording the cancel of stream %q's replays: %w", stream, err)
	}
	return nil
}

// LastReplayCancel returns when stream's replays were last cancelled
// (RecordReplayCancel), or nil when never.
func LastReplayCancel(ctx context.Context, st Store, stream string) (*time.Time, error) {
	return LastMark(ctx, st, ReplayCancelMarkName(stream), replayCancelLeaseName(stream))
}

// LastSweep returns when the last sweep of stream's reconciler ended, by
// any process (the mark SweepMarkName), or nil when none was recorded.
func LastSweep(ctx context.Context, st Store, stream string) (*time.Time, error) {
	return LastMark(ctx, st, SweepMarkName(stream), ReconcilerLeaseName(stream))
}

// LastMark returns the time of the mark name, or, when a store migrated
// from an older version holds none yet, the checkpoint time of the lease
// legacy that recorded the same time before marks; nil when neither
// exists.
func LastMark(ctx context.Context, st Store, name, legacy string) (*time.Time, error) {
	at, err := st.Mark(ctx, name)
	if err != nil || at != nil {
		return at, err
	}
	ls, err := st.ReadLease(ctx, legacy)
	if err != nil || ls == nil {
		return nil, err
	}
	return ls.CheckpointAt, nil
}
