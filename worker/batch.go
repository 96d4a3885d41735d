package worker

import (
	"bytes"
	"context"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/redis/go-redis/v9"
	"go.mongodb.org/mongo-driver/bson"
	"go.mongodb.org/mongo-driver/bson/primitive"
	"go.uber.org/zap"

	"github.com/outboxd/outboxd/internal/mongodb"
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

// handle runs one batch end to end: decode, one Find of the originals, one
// PostgreSQL transaction, one UpdateMany for syncedAt, then the dead letters
// and one XACK. Any error leaves the whole batch unacknowledged; running it
// again converges to the same state.
func (w *Worker) handle(ctx context.Context, msgs []redis.XMessage) error {
	w.metrics.batchSize.Observe(float64(len(msgs)))
	var (
		dead    []deadLetter
		entries = map[primitive.ObjectID][]redis.XMessage{}
	)
	for _, m := range msgs {
		msg, err := outbox.DecodeMessage(m.Values)
		if err != nil {
			dead = append(dead, deadLetter{msg: m, err: err, category: outbox.CategoryNonRetryable})
			continue
		}
		oid, _ := primitive.ObjectIDFromHex(msg.EventID) // checked by DecodeMessage
		entries[oid] = append(entries[oid], m)
	}
	ids := slices.SortedFunc(maps.Keys(entries), func(a, b primitive.ObjectID) int { return bytes.Compare(a[:], b[:]) })

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
			err = fmt.Errorf("%w: event %s", errMissingOriginal, id.Hex())
		default:
			events = append(events, originals[id])
			continue
		}
		for i, m := range entries[id] {
			dl := deadLetter{msg: m, eventID: id.Hex(), err: err, category: outbox.CategoryNonRetryable}
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
	if err := w.cfg.Faults.Check(FaultAfterCommit); err != nil {
		return err
	}

	synced := make([]primitive.ObjectID, 0, len(events))
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
	now := w.cfg.Clock.Now()
	for _, ev := range firstSync {
		w.metrics.latency.Observe(now.Sub(ev.CreatedAt).Seconds())
	}
	if err := w.park(ctx, parked); err != nil {
		return err
	}
	if err := w.cfg.Faults.Check(FaultAfterSyncedAt); err != nil {
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

// load reads the originals of ids with one Find. A document that does not
// decode, or lacks what the read model needs, is returned in invalid.
func (w *Worker) load(ctx context.Context, ids []primitive.ObjectID) (map[primitive.ObjectID]*outbox.Event, map[primitive.ObjectID]error, error) {
	originals := make(map[primitive.ObjectID]*outbox.Event, len(ids))
	invalid := map[primitive.ObjectID]error{}
	if len(ids) == 0 {
		return originals, invalid, nil
	}
	cur, err := w.db.Collection(outbox.EventsCollection).Find(ctx, bson.M{"_id": mongodb.IDsIn(ids)})
	if err != nil {
		return nil, nil, fmt.Errorf("error reading originals: %w", err)
	}
	var docs []bson.Raw
	if err := cur.All(ctx, &docs); err != nil {
		return nil, nil, fmt.Errorf("error reading originals: %w", err)
	}
	for _, doc := range docs {
		oid, ok := doc.Lookup("_id").ObjectIDOK()
		if !ok {
			continue
		}
		var ev outbox.Event
		if err := bson.Unmarshal(doc, &ev); err != nil {
			invalid[oid] = fmt.Errorf("%w: event %s does not decode: %v", errInvalidOriginal, oid.Hex(), err)
			continue
		}
		if err := checkOriginal(&ev); err != nil {
			invalid[oid] = err
			continue
		}
		originals[oid] = &ev
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
		return fmt.Errorf("%w: event %s has no %s", errInvalidOriginal, ev.ID.Hex(), missing)
	}
	if _, err := projectRows([]*outbox.Event{ev}); err != nil {
		return fmt.Errorf("%w: %v", errInvalidOriginal, err)
	}
	return nil
}

// project writes events in one transaction. When that fails because of a
// record, it projects each event alone to find the failing ones, so that
// one bad record does not hold back the others; those are returned in
// failed. Any other error is returned as is.
func (w *Worker) project(ctx context.Context, events []*outbox.Event) (failed map[primitive.ObjectID]error, err error) {
	if len(events) == 0 {
		return nil, nil
	}
	err = w.projectTx(ctx, events)
	if classify(err) != classRecord {
		return nil, err
	}
	failed = map[primitive.ObjectID]error{}
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
func (w *Worker) poison(ctx context.Context, failed map[primitive.ObjectID]error, entries map[primitive.ObjectID][]redis.XMessage) (poison []deadLetter, pending []string, err error) {
	var cmds []*redis.XPendingExtCmd
	var order []primitive.ObjectID
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
	deliveries := map[primitive.ObjectID]int64{}
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
			w.logger.Warn("record failed; left pending for another delivery", zap.String("event_id", id.Hex()),
				zap.Int64("deliveries", n), zap.Error(ferr))
			continue
		}
		for _, m := range entries[id] {
			poison = append(poison, deadLetter{msg: m, eventID: id.Hex(), err: ferr, category: outbox.CategoryPoison, deliveries: n})
		}
	}
	return poison, pending, nil
}

// markSynced sets syncedAt (and clears a syncFailure a replay overcame) on
// the originals not yet marked, in one UpdateMany.
func (w *Worker) markSynced(ctx context.Context, ids []primitive.ObjectID) error {
	if len(ids) == 0 {
		return nil
	}
	now := w.cfg.Clock.Now().UTC()
	_, err := w.db.Collection(outbox.EventsCollection).UpdateMany(ctx,
		bson.M{"_id": mongodb.IDsIn(ids), "syncedAt": nil},
		bson.M{"$set": bson.M{"syncedAt": now, "syncFailure": nil}})
	if err != nil {
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
		oid, _ := primitive.ObjectIDFromHex(dl.eventID)
		f := outbox.SyncFailure{
			Category: dl.category, Code: reason(dl.err), Message: dl.err.Error(),
			At: w.cfg.Clock.Now().UTC(), Deliveries: dl.deliveries,
		}
		_, err := w.db.Collection(outbox.EventsCollection).UpdateOne(ctx,
			bson.M{"_id": oid, "syncedAt": nil}, bson.M{"$set": bson.M{"syncFailure": f}})
		if err != nil {
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
	now := w.cfg.Clock.Now().UTC().Format(time.RFC3339Nano)
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
