package worker

import (
	"context"
	"time"

	"go.uber.org/zap"

	"github.com/outboxd/outboxd/internal/stream"
)

// touchMax bounds how many held entries one touch refreshes; a worker holds
// at most a batch in flight plus the records waiting for a delivery.
const touchMax = 100_000

// keepHeld touches, every ClaimIdle/4, this consumer's pending entries idle
// for ClaimIdle/4 or more (stream.Group.Touch), so that no other consumer's
// XAUTOCLAIM takes a batch paused by an outage or a record waiting for its
// next delivery: an outage of any length never hands entries from worker to
// worker, and never raises their delivery counts. When the loop shows no
// sign of life for ClaimIdle plus its longest wait, the worker counts as
// wedged and stops touching: its entries are then taken over like a dead
// worker's.
func (r *reader) keepHeld(ctx context.Context, stop <-chan struct{}) {
	every := max(r.cfg.ClaimIdle/4, time.Millisecond)
	wedged := r.cfg.ClaimIdle + max(r.cfg.Block, r.cfg.BackoffMax, r.cfg.BreakerTimeout)
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		select {
		case <-stop:
			return
		case <-ctx.Done():
			return
		case <-t.C:
		}
		if time.Since(time.Unix(0, r.beat.Load())) > wedged {
			continue
		}
		for _, g := range r.groups() {
			if err := g.Touch(ctx, every, touchMax); err != nil && ctx.Err() == nil {
				r.logger.Debug("error touching held entries", zap.String("lane", r.lane(g)), zap.Error(err))
			}
		}
	}
}

// housekeepingEvery is how often the worker looks for expired consumers.
func (r *reader) housekeepingEvery() time.Duration {
	return min(max(r.cfg.ConsumerExpiry/4, time.Millisecond), time.Hour)
}

// housekeep removes from the group, on the stream and on its replay lane,
// the other consumers idle longer than ConsumerExpiry with nothing
// pending. Failures are logged and left for the next round.
func (r *reader) housekeep(ctx context.Context) {
	for _, g := range r.groups() {
		r.housekeepOn(ctx, g)
	}
}

// housekeepOn is housekeep on the stream of g.
func (r *reader) housekeepOn(ctx context.Context, g *stream.Group) {
	consumers, err := g.Consumers(ctx)
	if err != nil {
		if ctx.Err() == nil {
			r.logger.Debug("error listing consumers", zap.Error(err))
		}
		return
	}
	for _, c := range consumers {
		if c.Name == r.cfg.Consumer || c.Pending > 0 || c.Idle < r.cfg.ConsumerExpiry {
			continue
		}
		removed, err := g.RemoveConsumer(ctx, c.Name)
		if err != nil {
			if ctx.Err() == nil {
				r.logger.Debug("error removing an expired consumer", zap.String("expired", c.Name), zap.Error(err))
			}
			return
		}
		if removed {
			r.metrics.consumersDeleted.Inc()
			r.logger.Info("removed an expired consumer from the group", zap.String("expired", c.Name), zap.Duration("idle", c.Idle))
		}
	}
}
