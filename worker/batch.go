package worker

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/redis/go-redis/v9"
	"go.uber.org/zap"

	"github.com/outboxd/outboxd/outbox"
)

// deadLetter is an entry to move to the dead-letter stream.
type deadLetter struct {
	msg        redis.XMessage
	eventID    string
	err        error
	category   string
	deliveries int64
}

// handle runs one batch end to end: decode, one read of the originals, one
// PostgreSQL transaction, one write of syncedAt, then the dead letters and
// one XACK. Any error leaves the whole batch unacknowledged; running it
// again converges to the same state.
func (w *Worker) handle(ctx context.Context, msgs []redis.XMessage) error {
	w.metrics.batchSize.Observe(float64(len(msgs)))
	var (
		dead    []deadLetter
		entries = map[string][]redis.XMessage{}
	)
	for _, m := range msgs {
		msg, err := outbox.DecodeMessage(m.Values)
		if err != nil {
			dead = append(dead, deadLetter{msg: m, err: err, category: outbox.CategoryNonRetryable})
			continue
		}
		entries[msg.EventID] = append(entries[msg.EventID], m)
	}
	ids := slices.Sorted(maps.Keys(entries))

	originals, invalid, err := w.load(ctx, ids)
	if err != nil {
		return err
	}
	var events []*outbox.Event
	var parked []deadLetter // originals that get syncFailure
	for _, id := range ids {
		var err error
		switch {
		case invalid[id] != nil:
			err = invalid[id]
		case originals[id] == nil:
			err = fmt.Errorf("%w: event %s", errMissingOriginal, id)
		default:
			events = append(events, originals[id])
			continue
		}
		for i, m := range entries[id] {
			dl := deadLetter{msg: m, eventID: id, err: err, category: outbox.CategoryNonRetryable}
			dead = append(dead, dl)
			if i == 0 && invalid[id] != nil {
				parked = append(parked, dl)
			}
		}
	}

	failed, err := w.project(ctx, events)
	if err != nil {
		return err
	}
	if err := w.cfg.faults.Check(FaultAfterCommit); err != nil {
		return err
	}

	synced := make([]string, 0, len(events))
	keep := map[string]bool{} // entries left pending for another delivery
	if len(failed) > 0 {
		poison, pending, err := w.poison(ctx, failed, entries)
		if err != nil {
			return err
		}
		for _, dl := range poison {
			dead = append(dead, dl)
			parked = append(parked, dl)
		}
		for _, id := range pending {
			keep[id] = true
		}
	}
	var firstSync []*outbox.Event // not synced before: their latency counts
	for _, ev := range events {
		if failed[ev.ID] == nil {
			synced = append(synced, ev.ID)
			if ev.SyncedAt == nil {
				firstSync = append(firstSync, ev)
			}
		}
	}
	if err := w.markSynced(ctx, synced); err != nil {
		return err
	}
	now := w.cfg.Now()
	for _, ev := range firstSync {
		w.metrics.latency.Observe(now.Sub(ev.CreatedAt).Seconds())
	}
	if err := w.park(ctx, parked); err != nil {
		return err
	}
	if err := w.cfg.faults.Check(FaultAfterSyncedAt); err != nil {
		return err
	}

	ack := make([]string, 0, len(msgs))
	for _, m := range msgs {
		if !keep[m.ID] {
			ack = append(ack, m.ID)
		}
	}
	if err := w.finish(ctx, dead, ack); err != nil {
		return err
	}
	nDead := 0
	for _, dl := range dead {
		if dl.category == outbox.CategoryPoison {
			w.metrics.processed.WithLabelValues("poisoned").Inc()
		} else {
			nDead++
		}
		w.logger.Warn("dead-lettered stream entry", zap.String("entry_id", dl.msg.ID), zap.String("event_id", dl.eventID),
			zap.String("reason", reason(dl.err)), zap.String("category", dl.category), zap.Error(dl.err))
	}
	w.metrics.processed.WithLabelValues("dead_lettered").Add(float64(nDead))
	w.metrics.processed.WithLabelValues("synced").Add(float64(len(ack) - len(dead)))
	return nil
}

// load reads the originals of ids with one store read. An original that
// does not decode, or lacks what the read model needs, is returned in
// invalid.
func (w *Worker) load(ctx context.Context, ids []string) (map[string]*outbox.Event, map[string]error, error) {
	originals := make(map[string]*outbox.Event, len(ids))
	invalid := map[string]error{}
	if len(ids) == 0 {
		return originals, invalid, nil
	}
	loaded, err := w.st.LoadEvents(ctx, ids)
	if err != nil {
		return nil, nil, fmt.Errorf("error reading originals: %w", err)
	}
	for id, l := range loaded {
		if l.Err != nil {
			invalid[id] = fmt.Errorf("%w: %w", errInvalidOriginal, l.Err)
			continue
		}
		if err := checkOriginal(l.Event); err != nil {
			invalid[id] = err
			continue
		}
		originals[id] = l.Event
	}
	return originals, invalid, nil
}

// checkOriginal reports an original that cannot become a read-model row.
func checkOriginal(ev *outbox.Event) error {
	var missing string
	switch {
	case ev.IdempotencyKey == "":
		missing = "idempotencyKey"
	case ev.SourceKey == "":
		missing = "sourceKey"
	case ev.DeviceKey == "":
		missing = "deviceKey"
	case ev.Type == "":
		missing = "type"
	case ev.OccurredAt.IsZero():
		missing = "occurredAt"
	case ev.CreatedAt.IsZero():
		missing = "createdAt"
	}
	if missing != "" {
		return fmt.Errorf("%w: event %s has no %s", errInvalidOriginal, ev.ID, missing)
	}
	return nil
}

// project writes events in one transaction. When that fails because of a
// record, it projects each event alone to find the failing ones, so that
// one bad record does not hold back the others; those are returned in
// failed. Any other error is returned as is.
func (w *Worker) project(ctx context.Context, events []*outbox.Event) (failed map[string]error, err error) {
	if len(events) == 0 {
		return nil, nil
	}
	err = w.projectTx(ctx, events)
	if classify(err) != classRecord {
		return nil, err
	}
	failed = map[string]error{}
	if len(events) == 1 {
		failed[events[0].ID] = err
		return failed, nil
	}
	for _, ev := range events {
		err := w.projectTx(ctx, []*outbox.Event{ev})
		switch classify(err) {
		case classOK:
		case classRecord:
			failed[ev.ID] = err
		default:
			return nil, err
		}
	}
	return failed, nil
}

// projectTx runs the projector in one transaction through the circuit
// breaker, again after a serialization failure or deadlock.
func (w *Worker) projectTx(ctx context.Context, events []*outbox.Event) error {
	started := time.Now()
	defer func() { w.metrics.projection.Observe(time.Since(started).Seconds()) }()
	_, err := w.breaker.Execute(func() (struct{}, error) {
		var err error
		for attempt := 1; attempt <= w.cfg.TxAttempts; attempt++ {
			err = pgx.BeginFunc(ctx, w.pool, func(tx pgx.Tx) error {
				return w.cfg.Projector.Project(ctx, tx, events)
			})
			if classify(err) != classTxRetry {
				break
			}
			w.metrics.retries.WithLabelValues("transaction").Inc()
		}
		return struct{}{}, err
	})
	return err
}

// poison looks up the delivery count of the entries of failed events: those
// delivered MaxDeliveries times are returned as poison, the others stay
// pending to be reclaimed after ClaimIdle.
func (w *Worker) poison(ctx context.Context, failed map[string]error, entries map[string][]redis.XMessage) (poison []deadLetter, pending []string, err error) {
	var cmds []*redis.XPendingExtCmd
	var order []string
	_, err = w.rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
		for id := range failed {
			for _, m := range entries[id] {
				order = append(order, id)
				cmds = append(cmds, p.XPendingExt(ctx, &redis.XPendingExtArgs{
					Stream: w.cfg.Stream, Group: w.cfg.Group, Start: m.ID, End: m.ID, Count: 1,
				}))
			}
		}
		return nil
	})
	if err != nil {
		return nil, nil, fmt.Errorf("error reading delivery counts: %w", err)
	}
	deliveries := map[string]int64{}
	for i, cmd := range cmds {
		for _, p := range cmd.Val() {
			deliveries[order[i]] = max(deliveries[order[i]], p.RetryCount)
		}
	}
	for id, ferr := range failed {
		n := deliveries[id]
		if n < int64(w.cfg.MaxDeliveries) {
			for _, m := range entries[id] {
				pending = append(pending, m.ID)
			}
			w.logger.Warn("record failed; left pending for another delivery", zap.String("event_id", id),
				zap.Int64("deliveries", n), zap.Error(ferr))
			continue
		}
		for _, m := range entries[id] {
			poison = append(poison, deadLetter{msg: m, eventID: id, err: ferr, category: outbox.CategoryPoison, deliveries: n})
		}
	}
	return poison, pending, nil
}

// markSynced sets syncedAt (and clears a syncFailure a replay overcame) on
// the originals not yet marked, in one store write.
func (w *Worker) markSynced(ctx context.Context, ids []string) error {
	if len(ids) == 0 {
		return nil
	}
	if _, err := w.st.MarkSynced(ctx, ids, w.cfg.Now()); err != nil {
		return fmt.Errorf("error setting syncedAt on %d originals: %w", len(ids), err)
	}
	return nil
}

// park sets syncFailure on originals that will not be projected.
func (w *Worker) park(ctx context.Context, parked []deadLetter) error {
	seen := map[string]bool{}
	for _, dl := range parked {
		if seen[dl.eventID] {
			continue
		}
		seen[dl.eventID] = true
		f := outbox.SyncFailure{
			Category: dl.category, Code: reason(dl.err), Message: dl.err.Error(),
			At: w.cfg.Now().UTC(), Deliveries: dl.deliveries,
		}
		if _, err := w.st.Park(ctx, dl.eventID, f); err != nil {
			return fmt.Errorf("error setting syncFailure on %s: %w", dl.eventID, err)
		}
	}
	return nil
}

// finish writes the dead letters and acknowledges ack in one round trip.
func (w *Worker) finish(ctx context.Context, dead []deadLetter, ack []string) error {
	if len(dead) == 0 && len(ack) == 0 {
		return nil
	}
	dlq := outbox.DLQStream(w.cfg.Stream)
	now := w.cfg.Now().UTC().Format(time.RFC3339Nano)
	var ackCmd *redis.IntCmd
	cmds, err := w.rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
		for _, dl := range dead {
			payload, _ := dl.msg.Values[outbox.PayloadField].(string)
			p.XAdd(ctx, &redis.XAddArgs{Stream: dlq, Values: map[string]any{
				"reason": reason(dl.err), "category": dl.category, "error": dl.err.Error(),
				"entryId": dl.msg.ID, "eventId": dl.eventID, "stream": w.cfg.Stream, "group": w.cfg.Group,
				"consumer": w.cfg.Consumer, "deliveries": strconv.FormatInt(dl.deliveries, 10), "at": now,
				outbox.PayloadField: payload,
			}})
		}
		if len(ack) > 0 {
			ackCmd = p.XAck(ctx, w.cfg.Stream, w.cfg.Group, ack...)
		}
		return nil
	})
	for _, c := range cmds {
		if c.Err() != nil {
			return fmt.Errorf("error dead-lettering or acknowledging %d entries: %w", len(ack), c.Err())
		}
	}
	if err != nil {
		return fmt.Errorf("error dead-lettering or acknowledging %d entries: %w", len(ack), err)
	}
	if ackCmd != nil && ackCmd.Val() < int64(len(ack)) {
		// Another consumer took some over (XAUTOCLAIM) and acknowledged
		// them, or Redis lost them; the effects are idempotent either way.
		w.logger.Debug("some entries were already acknowledged", zap.Int64("acked", ackCmd.Val()), zap.Int("entries", len(ack)))
	}
	return nil
}
