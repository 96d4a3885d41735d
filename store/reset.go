package store

import (
	"context"
	"errors"
	"fmt"
	"time"
)

// ResetLeaseName names the lease whose checkpoint time records the last
// reset of stream's Redis data: a worker found its consumer group, or the
// stream, gone (Redis restarted empty, or evicted the keys) and created it
// again. No process holds it for long; it only carries the time.
func ResetLeaseName(stream string) string { return "reset:" + stream }

// resetLeaseTTL bounds how long RecordReset holds the reset lease.
const resetLeaseTTL = 10 * time.Second

// RecordReset records in st that stream's consumer group was created anew
// at now (by owner): the originals created before it that are not synced
// may have been lost with Redis's data, and the reconciler takes them at
// once, whatever their age (LastReset). When another process holds the
// lease at that moment, it is recording a reset of its own and nothing is
// written.
func RecordReset(ctx context.Context, st Store, stream, owner string, now time.Time) error {
	if err := recordTime(ctx, st, ResetLeaseName(stream), owner, now); err != nil {
		return fmt.Errorf("error recording the reset of stream %q: %w", stream, err)
	}
	return nil
}

// LastReset returns when stream's consumer group was last created anew
// (RecordReset), or nil when never.
func LastReset(ctx context.Context, st Store, stream string) (*time.Time, error) {
	return lastTime(ctx, st, ResetLeaseName(stream))
}

// ReplayCancelLeaseName names the lease whose checkpoint time records the
// last cancel of stream's replays (RecordReplayCancel), as the reset
// lease does a reset.
func ReplayCancelLeaseName(stream string) string { return "replay-cancel:" + stream }

// RecordReplayCancel records in st that an operator cancelled, at now,
// every replay of stream that began before: a chunk of one is refused
// (LastReplayCancel).
func RecordReplayCancel(ctx context.Context, st Store, stream, owner string, now time.Time) error {
	if err := recordTime(ctx, st, ReplayCancelLeaseName(stream), owner, now); err != nil {
		return fmt.Errorf("error recording the cancel of stream %q's replays: %w", stream, err)
	}
	return nil
}

// LastReplayCancel returns when stream's replays were last cancelled
// (RecordReplayCancel), or nil when never.
func LastReplayCancel(ctx context.Context, st Store, stream string) (*time.Time, error) {
	return lastTime(ctx, st, ReplayCancelLeaseName(stream))
}

// recordTime writes now as the checkpoint time of the lease name, held
// for the write only; another holder at that moment is recording a time
// of its own and nothing is written.
func recordTime(ctx context.Context, st Store, name, owner string, now time.Time) error {
	lease, err := st.AcquireLease(ctx, name, owner, now, resetLeaseTTL)
	if err != nil || !lease.Held() {
		return err
	}
	err = st.SaveCheckpoint(ctx, lease, Checkpoint{At: now})
	if _, rerr := st.ReleaseLease(ctx, lease); rerr != nil {
		err = errors.Join(err, rerr)
	}
	return err
}

// lastTime returns the checkpoint time of the lease name (recordTime), or
// nil when never written.
func lastTime(ctx context.Context, st Store, name string) (*time.Time, error) {
	ls, err := st.ReadLease(ctx, name)
	if err != nil || ls == nil {
		return nil, err
	}
	return ls.CheckpointAt, nil
}
