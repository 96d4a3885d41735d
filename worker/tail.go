package worker

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"time"

	"go.uber.org/zap"

	"github.com/outboxd/outboxd/internal/stream"
	"github.com/outboxd/outboxd/internal/tracing"
	"github.com/outboxd/outboxd/outbox"
	"github.com/outboxd/outboxd/store"
)

// tailWriter writes the tails of batches once their PostgreSQL
// transaction committed: syncedAt of the projected originals, syncFailure
// of the parked ones, then the dead letters, the XACK and the budgets in
// one MULTI/EXEC (writeTail); it settles each written tail, handing its
// held entries back to the reader (hold) and counting it (apply). A tail
// is written at once, behind the next batch's transaction while a
// read-ahead is in flight (behind), or gathered with the tails of the
// small batches after it (gather). Only the run goroutine calls it; a
// tail written behind is written by a goroutine of its own.
type tailWriter struct {
	*shared
	st store.Store
	// replay is the consumer of the replay lane, whose acknowledgements
	// apply counts.
	replay *stream.Group
	// size is the batch size: the tails of smaller batches are gathered.
	size *sizing
	// hold keeps an entry a settled tail holds for a later delivery (the
	// reader's hold).
	hold func(heldEntry)

	// behind is the tail of the last batch while it is written behind the
	// next batch's PostgreSQL transaction (write), or nil.
	behind *behindTail
	// gather is the tails of small batches gathered to be written as one
	// (Config.TailGather) until gatherUntil, or nil.
	gather      *tail
	gatherUntil time.Time
}

// tail is what a batch writes after its PostgreSQL transaction committed
// (writeTail), and what it then leaves to the loop (out, whose dead are
// the dead letters to write). A failed tail runs again on its own: each of
// its writes is idempotent, and one done is not done again.
type tail struct {
	g *stream.Group
	// spans are the batch's spans, which end with the tail; gathered
	// those of the batches whose tails were added to it (addGather).
	spans    *tracing.Items
	gathered []*tracing.Items
	// firstSync are the originals projected and not synced before (nil
	// once their syncedAt is written); origins the origin of each event.
	firstSync []*outbox.Event
	origins   map[string]outbox.Origin
	// parked get syncFailure (nil once written).
	parked []deadLetter
	ack    []string
	charge map[string]int64
	out    outcome
}

// endSpans ends the spans of the tail's batches with err.
func (t *tail) endSpans(err error) {
	t.spans.End(err)
	for _, s := range t.gathered {
		s.End(err)
	}
}

// write writes t, the tail of a handled batch of n entries, and settles
// it, after it settles the tail written behind the loop: it gathers t with
// the tails after it when t gathers, and writes it behind the next
// batch's transaction when ahead (a read-ahead is in flight) and the
// worker is not Ordered. It returns nil when the tail was written (or
// left to be written) or a stop interrupted it (its entries then stay
// pending), and the error that stops the worker otherwise.
func (tw *tailWriter) write(fetchCtx, workCtx context.Context, t *tail, n int, ahead bool) error {
	if err := tw.settleBehind(); err != nil {
		return err
	}
	if tw.gathers(fetchCtx, t, n) {
		tw.addGather(t)
		if len(tw.gather.ack) < tw.size.get() {
			return nil
		}
		return tw.flushGather(fetchCtx, workCtx)
	}
	if err := tw.flushGather(fetchCtx, workCtx); err != nil {
		return err
	}
	if ahead && !tw.cfg.Ordered {
		done := make(chan error, 1)
		tailCtx, cancel := context.WithCancel(fetchCtx)
		tw.behind = &behindTail{t: t, done: done, cancel: cancel}
		go func() {
			defer cancel()
			done <- tw.writeTailRetrying(tailCtx, workCtx, t)
		}()
		return nil
	}
	if err := tw.writeTailRetrying(fetchCtx, workCtx, t); err != nil {
		return unlessStopped(err)
	}
	tw.apply(t.g, t.out)
	return nil
}

// behindTail is the tail of a batch written while the loop goes on with
// the next batch.
type behindTail struct {
	t    *tail
	done <-chan error
	// cancel ends the tail's retries (an abrupt stop leaves its entries
	// pending, as a crash would).
	cancel context.CancelFunc
}

// writeTailRetrying writes t (writeTail) until it succeeds, retrying
// infrastructure failures like process, then ends the batch's spans.
func (tw *tailWriter) writeTailRetrying(fetchCtx, workCtx context.Context, t *tail) error {
	err := tw.retry(fetchCtx, "finishing a batch", func() error { return tw.writeTail(workCtx, t) })
	t.endSpans(err)
	return err
}

// writeTail writes the tail of a batch: syncedAt of its projected
// originals (counting their latency), syncFailure of the parked ones, then
// finish. workCtx is the context of the work in progress; the tail's own
// spans are added to it.
func (tw *tailWriter) writeTail(workCtx context.Context, t *tail) error {
	ctx := t.spans.Context(workCtx)
	ids := make([]string, len(t.firstSync))
	for i, ev := range t.firstSync {
		ids[i] = ev.ID
	}
	if err := tw.markSynced(ctx, ids); err != nil {
		return err
	}
	now := tw.cfg.Now()
	for _, ev := range t.firstSync {
		origin := t.origins[ev.ID]
		tw.metrics.latency.WithLabelValues(string(origin)).Observe(now.Sub(ev.CreatedAt).Seconds())
		if origin == outbox.OriginReconciler && ev.LastRequeuedAt != nil {
			tw.metrics.requeueToSynced.Observe(max(0, now.Sub(*ev.LastRequeuedAt).Seconds()))
		}
	}
	t.firstSync = nil
	if err := tw.park(ctx, t.parked); err != nil {
		return err
	}
	t.parked = nil
	if err := tw.cfg.faults.Check(faultAfterSyncedAt); err != nil {
		return err
	}
	return tw.finish(ctx, t.g, t.out.dead, t.ack, t.charge)
}

// markSynced sets syncedAt (and clears a syncFailure a replay overcame) on
// the originals not yet marked, in one store write.
func (tw *tailWriter) markSynced(ctx context.Context, ids []string) error {
	if len(ids) == 0 || tw.cfg.LeavesSynced {
		return nil
	}
	err := tw.storeCall(func() error {
		_, err := tw.st.MarkSynced(ctx, ids, tw.cfg.Now())
		return err
	})
	if err != nil {
		return fmt.Errorf("error setting syncedAt on %d originals: %w", len(ids), err)
	}
	return nil
}

// park sets syncFailure on originals that will not be projected.
func (tw *tailWriter) park(ctx context.Context, parked []deadLetter) error {
	if tw.cfg.LeavesSynced {
		return nil
	}
	seen := map[string]bool{}
	for _, dl := range parked {
		if seen[dl.eventID] {
			continue
		}
		seen[dl.eventID] = true
		f := outbox.SyncFailure{
			Category: dl.category, Code: reason(dl.err), Message: dl.err.Error(),
			At: tw.cfg.Now().UTC(), Deliveries: dl.deliveries,
		}
		err := tw.storeCall(func() error {
			_, err := tw.st.Park(ctx, dl.eventID, f)
			return err
		})
		if err != nil {
			return fmt.Errorf("error setting syncFailure on %s: %w", dl.eventID, err)
		}
	}
	return nil
}

// finish writes, in one MULTI/EXEC (stream.Group.Finish), the dead
// letters, the XACK of ack (the dead letters included), the removal of ack
// from the delivery budgets and the new budgets of charge: a crash leaves
// either all of it or none, so never a dead letter whose entry is still
// pending (a duplicate dead letter on the next delivery), nor a failure
// charged to an entry that was not.
func (tw *tailWriter) finish(ctx context.Context, g *stream.Group, dead []deadLetter, ack []string, charge map[string]int64) error {
	at := tw.cfg.Now().UTC()
	letters := make([]stream.DeadLetter, len(dead))
	for i, dl := range dead {
		letters[i] = stream.DeadLetter{Category: dl.category, Code: reason(dl.err), Error: dl.err.Error(),
			EntryID: dl.msg.ID, EventID: dl.eventID, Deliveries: dl.deliveries, At: at, Payload: dl.msg.Payload()}
	}
	acked, err := g.Finish(ctx, stream.Finish{DeadLetters: letters, Ack: ack, Charge: charge})
	if err := tw.redisDone(err); err != nil {
		return fmt.Errorf("error dead-lettering or acknowledging %d entries: %w", len(ack), err)
	}
	if acked < int64(len(ack)) {
		// Another consumer took some over (XAUTOCLAIM) and acknowledged
		// them, Redis lost them, or they were trimmed; the effects are
		// idempotent either way.
		tw.logger.Debug("some entries were already acknowledged", zap.Int64("acked", acked), zap.Int("entries", len(ack)))
	}
	return nil
}

// settleBehind waits for the tail written behind the loop, if any, and
// applies its outcome. It returns nil when the tail was written or a stop
// interrupted it (its entries then stay pending), and the error that stops
// the worker otherwise.
func (tw *tailWriter) settleBehind() error {
	if tw.behind == nil {
		return nil
	}
	b := tw.behind
	tw.behind = nil
	if err := <-b.done; err != nil {
		return unlessStopped(err)
	}
	tw.apply(b.t.g, b.t.out)
	return nil
}

// settle writes the gathered tails and waits for the tail written behind
// the loop, applying their outcomes (flushGather, settleBehind).
func (tw *tailWriter) settle(fetchCtx, workCtx context.Context) error {
	if err := tw.flushGather(fetchCtx, workCtx); err != nil {
		return err
	}
	return tw.settleBehind()
}

// gathers says whether the tail t of a batch of n entries waits for the
// tails after it (Config.TailGather): a batch smaller than the batch size
// whose every event was projected, read by the same consumer as the tails
// gathered already, while the worker is not stopping.
func (tw *tailWriter) gathers(fetchCtx context.Context, t *tail, n int) bool {
	return tw.cfg.TailGather > 0 && !tw.cfg.Ordered && n < tw.size.get() && fetchCtx.Err() == nil &&
		len(t.parked) == 0 && len(t.charge) == 0 && len(t.out.hold) == 0 && len(t.out.dead) == 0 &&
		len(t.out.failures) == 0 && (tw.gather == nil || tw.gather.g == t.g)
}

// addGather adds t to the gathered tails; the first starts the wait.
func (tw *tailWriter) addGather(t *tail) {
	if tw.gather == nil {
		tw.gather = t
		tw.gatherUntil = time.Now().Add(min(tw.cfg.TailGather, tw.cfg.ClaimIdle/10))
		return
	}
	g := tw.gather
	g.firstSync = append(g.firstSync, t.firstSync...)
	if g.origins == nil {
		g.origins = map[string]outbox.Origin{}
	}
	maps.Copy(g.origins, t.origins)
	g.ack = append(g.ack, t.ack...)
	g.out.synced += t.out.synced
	g.gathered = append(g.gathered, t.spans)
}

// flushGather writes the gathered tails, if any, as one (writeTail) and
// applies their outcome.
func (tw *tailWriter) flushGather(fetchCtx, workCtx context.Context) error {
	t := tw.gather
	if t == nil {
		return nil
	}
	tw.gather = nil
	if err := tw.writeTailRetrying(fetchCtx, workCtx, t); err != nil {
		return unlessStopped(err)
	}
	tw.apply(t.g, t.out)
	return nil
}

// gatherDeadline returns when the gathered tails are due to be written,
// and whether any are gathered.
func (tw *tailWriter) gatherDeadline() (time.Time, bool) {
	return tw.gatherUntil, tw.gather != nil
}

// abandon cancels the tail written behind the loop and forgets the
// gathered tails after an abrupt stop (err): their entries stay pending,
// as after a crash.
func (tw *tailWriter) abandon(err error) {
	if tw.behind != nil {
		tw.behind.cancel()
	}
	if tw.gather != nil {
		tw.gather.endSpans(err)
		tw.gather = nil
	}
}

// apply settles a written tail of a batch of g: it hands the entries the
// batch holds to the reader (hold) and counts the batch.
func (tw *tailWriter) apply(g *stream.Group, out outcome) {
	for _, h := range out.hold {
		tw.hold(h)
	}
	tw.metrics.retries.WithLabelValues("record").Add(float64(out.charged))
	for _, f := range out.failures {
		tw.streak.Fail(f)
	}
	if out.synced > 0 {
		tw.streak.SucceedRecord()
	}
	nDead := 0
	for _, dl := range out.dead {
		code := reason(dl.err)
		tw.metrics.deadLetters.WithLabelValues(dl.category, code).Inc()
		switch {
		case dl.category == outbox.CategoryPoison:
			tw.metrics.processed.WithLabelValues("poisoned").Inc()
		case errors.Is(dl.err, errTrimmed):
			tw.metrics.trimmed.Inc()
			nDead++
		default:
			nDead++
		}
		if tw.cfg.DeadLetterHook != nil {
			tw.cfg.DeadLetterHook.Notify(g.Keys(), stream.DeadLetter{Category: dl.category, Code: code, Error: dl.err.Error(),
				EntryID: dl.msg.ID, EventID: dl.eventID, Deliveries: dl.deliveries, At: tw.cfg.Now().UTC()})
		}
		tw.logger.Warn("dead-lettered stream entry", zap.String("entry_id", dl.msg.ID), zap.String("event_id", dl.eventID),
			zap.String("reason", code), zap.String("category", dl.category), zap.Int64("deliveries", dl.deliveries), zap.Error(dl.err),
			traceID(dl.msg))
	}
	tw.metrics.processed.WithLabelValues("dead_lettered").Add(float64(nDead))
	tw.metrics.processed.WithLabelValues("synced").Add(float64(out.synced))
	if g == tw.replay {
		tw.metrics.replayAcked.Add(float64(out.synced + len(out.dead)))
	}
}
