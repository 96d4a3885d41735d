package reconciler

import (
	"context"
	"time"

	"github.com/outboxd/outboxd/internal/stream"
	"github.com/outboxd/outboxd/store"
)

// lagPoll is how often, after a sweep that reached its limit, the
// reconciler looks whether the workers have read what it published.
const lagPoll = 100 * time.Millisecond

// resetPoll is how often, between two sweeps, the reconciler looks for a
// new reset of Redis's data (store.RecordReset), which calls for a sweep
// at once.
const resetPoll = time.Second

// waitNext waits for the next sweep after rep: the next tick of the
// schedule or, when rep reached its limit and published (more candidates
// wait: after Redis lost data, thousands), as soon as the stream's
// consumer groups have read nearly all of it (their lag under half of
// Limit), so that a large loss is re-published sweep after sweep while the
// cap of Limit per sweep still keeps live traffic from waiting behind it.
// A new reset of Redis's data (store.RecordReset) calls for a sweep at
// once too. It returns false when ctx ended.
func (r *Reconciler) waitNext(ctx context.Context, tick <-chan time.Time, rep Report) bool {
	var poll <-chan time.Time
	// A sweep that failed after it published a full batch (a count, a
	// store that was busy for a moment) goes on as one that succeeded.
	if rep.LimitReached && rep.Published > 0 && !rep.RedisFull {
		t := time.NewTicker(lagPoll)
		defer t.Stop()
		poll = t.C
	}
	resets := time.NewTicker(resetPoll)
	defer resets.Stop()
	// The reset the sweep saw, not the last one now: a reset recorded
	// while the sweep ran calls for the next sweep at once.
	seen := rep.ResetAt
	for {
		select {
		case <-ctx.Done():
			return false
		case <-tick:
			return true
		case <-poll:
			if r.lagLow(ctx) {
				return true
			}
		case <-resets.C:
			if at, err := store.LastReset(ctx, r.st, r.cfg.Stream); err == nil && at != nil && (seen == nil || at.After(*seen)) {
				return true
			}
		}
	}
}

// lagLow reports whether every consumer group has less than half of Limit
// entries unread on every partition's stream (false when Redis cannot
// tell).
func (r *Reconciler) lagLow(ctx context.Context) bool {
	for _, keys := range stream.NewKeys(r.cfg.Stream, "").Split(r.cfg.Partitions).AllPartitions() {
		lags, err := r.rc.Lags(ctx, keys)
		if err != nil || len(lags) == 0 {
			return false
		}
		for _, l := range lags {
			if l.Key == keys.Stream() && (l.Lag == nil || *l.Lag >= int64(r.cfg.Limit/2)) {
				return false
			}
		}
	}
	return true
}
