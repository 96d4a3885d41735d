package dispatcher

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/cenkalti/backoff/v4"
	"go.uber.org/zap"

	"github.com/outboxd/outboxd/internal/failpolicy"
	"github.com/outboxd/outboxd/internal/stream"
	"github.com/outboxd/outboxd/outbox"
	"github.com/outboxd/outboxd/store"
)

// relay moves one batch: while an operator has paused the relay (of this
// partition or of all) it waits for the resume, then XADD (retried until Redis answers or the
// dispatcher stops), then hands it to m for its store write: dispatchedAt
// and the checkpoint (MarkRelayed; pos nil keeps the saved position), run
// in the background, merged with the batches added meanwhile, while the
// caller reads and adds the next ones (pipeline.go). Nothing is marked or
// checkpointed unless the XADD succeeded. Once the XADD went through, the
// rest runs on workCtx so that a stop request lets the batch finish. An error is the XADD's, a fault point's,
// or that of the write of an earlier batch.
func (d *Dispatcher) relay(ctx, workCtx context.Context, m *marks, entries []outbox.Entry, pos store.Position) (err error) {
	spans, entries := d.startRelaySpans(ctx, entries)
	handed := false // the write ends the spans once it has them
	defer func() {
		if !handed {
			spans.End(err)
		}
	}()
	workCtx = spans.Context(workCtx)
	if err := d.paused.Wait(ctx, func(p *store.PauseState) {
		d.logger.Info("relay paused by an operator: nothing added, marked or checkpointed until resumed",
			zap.String("stage", p.Stage), zap.String("by", p.By))
	}); err != nil {
		return err
	}
	d.streak.Refresh(ctx) // a halt, or a resume, of another process
	if err := d.xadd(ctx, workCtx, entries); err != nil {
		return err
	}
	d.relayed.Add(int64(len(entries)))
	d.metrics.relayed.Add(float64(len(entries)))
	if err := d.cfg.faults.Check(faultAfterXAdd); err != nil {
		_ = m.wait() // the earlier batch's write ends as it would have without a pipeline
		return err
	}
	ids := make([]string, len(entries))
	for i, e := range entries {
		ids[i] = e.ID
	}
	handed = true
	return m.start(workCtx, ids, pos, func(err error) { spans.End(err) })
}

// mark writes relayed batches to the store: dispatchedAt of ids and the
// checkpoint pos, in one write fenced by the lease (MarkRelayed).
func (d *Dispatcher) mark(ctx context.Context, lease store.Lease, ids []string, pos store.Position, batches int) error {
	now := d.cfg.Now()
	if err := d.st.MarkRelayed(ctx, lease, ids, store.Checkpoint{Position: pos, At: now}); err != nil {
		return fmt.Errorf("error marking %d outbox entries dispatched: %w", len(ids), err)
	}
	d.checkpointed(now)
	if err := d.cfg.faults.Check(faultAfterMark); err != nil {
		return err
	}
	d.dispatched.Add(int64(len(ids)))
	d.batches.Add(int64(batches))
	d.metrics.batches.Add(float64(batches))
	d.writes.Add(1)
	d.metrics.writes.Inc()
	return nil
}

// checkpoint records that everything up to pos is in the stream (pos nil
// keeps the saved position unless forget). It is fenced by the lease.
func (d *Dispatcher) checkpoint(ctx context.Context, lease store.Lease, pos store.Position, forget bool) error {
	now := d.cfg.Now()
	if err := d.st.SaveCheckpoint(ctx, lease, store.Checkpoint{Position: pos, Forget: forget, At: now}); err != nil {
		return err
	}
	d.checkpointed(now)
	return nil
}

// checkpointed notes a checkpoint written at now.
func (d *Dispatcher) checkpointed(now time.Time) {
	d.streak.Succeed(failpolicy.SourceStore)
	d.metrics.checkpoint.Set(float64(now.UnixMilli()) / 1e3)
}

// xadd adds entries to the stream in one pipeline through the circuit
// breaker around Redis (the dispatcher's stream.Publisher), retrying with jittered back-off while Redis fails
// (once per BreakerTimeout while the failure's class is halted by the
// streak rule), until ctx ends. Each attempt runs on workCtx so that a stop
// request does not cut a pipeline in half.
func (d *Dispatcher) xadd(ctx, workCtx context.Context, entries []outbox.Entry) error {
	attempts := 0
	bo := &failpolicy.HaltBackOff{Inner: d.newBackoff(), Streak: d.streak, Probe: d.cfg.BreakerTimeout}
	msgs := make([]string, len(entries))
	for i, e := range entries {
		msgs[i] = e.Message
	}
	err := backoff.RetryNotify(func() error {
		if err := d.hold(); err != nil { // Redis is full (pressure.go)
			bo.Class = failpolicy.ClassInfrastructure
			return err
		}
		if err := d.publisher.Publish(workCtx, msgs); err != nil {
			d.refused(err)
			if ctx.Err() == nil { // a stop is not Redis's failure
				f := stream.Failure(err)
				d.streak.Fail(f)
				bo.Class = f.Class
			}
			return fmt.Errorf("error adding %d entries to the stream: %w", len(entries), err)
		}
		d.streak.Succeed(failpolicy.SourceRedis)
		return nil
	}, backoff.WithContext(bo, ctx), func(err error, wait time.Duration) {
		attempts++
		d.redisRetries.Add(1)
		d.metrics.redisRetries.Inc()
		if errors.Is(err, errBackpressure) {
			return // hold logs its start and end
		}
		if attempts == 1 || attempts%10 == 0 {
			d.logger.Warn("redis unavailable; holding the checkpoint and retrying", zap.String("code", stream.Failure(err).Code),
				zap.Int("attempts", attempts), zap.Duration("wait", wait), zap.Error(err))
		}
	})
	if err == nil && attempts > 0 {
		d.logger.Info("redis is back; relaying again", zap.Int("attempts", attempts))
	}
	return err
}
