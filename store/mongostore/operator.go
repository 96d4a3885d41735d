package mongostore

import (
	"context"
	"fmt"

	"go.mongodb.org/mongo-driver/bson"
	"go.mongodb.org/mongo-driver/bson/primitive"

	"github.com/outboxd/outboxd/outbox"
	"github.com/outboxd/outboxd/store"
)

// eventQueryFilter returns the filter and sort of q (ListEvents with the
// cursor, CountEvents without). The filter opens with the fields of the
// index that serves it: IndexDevice's (sourceKey, deviceKey, occurredAt)
// when both keys are given and the window is by occurredAt, else
// IndexOccurred's or IndexCreated's time (a range of devices is filtered
// from the time's range, as one source is); the sort is (time, _id).
func eventQueryFilter(q store.EventQuery, withCursor bool) (bson.D, bson.D) {
	field := "occurredAt"
	if q.By == store.ByCreated {
		field = "createdAt"
	}
	f := bson.D{}
	byDevice := field == "occurredAt" && q.SourceKey != "" && q.DeviceKey != ""
	if byDevice {
		f = append(f, bson.E{Key: "sourceKey", Value: q.SourceKey}, bson.E{Key: "deviceKey", Value: q.DeviceKey})
	}
	lo := q.From
	if withCursor && q.After != nil && q.After.At.After(lo) {
		lo = q.After.At
	}
	window := bson.D{}
	if !lo.IsZero() {
		window = append(window, bson.E{Key: "$gte", Value: lo.UTC()})
	}
	if !q.To.IsZero() {
		window = append(window, bson.E{Key: "$lt", Value: q.To.UTC()})
	}
	if len(window) > 0 {
		f = append(f, bson.E{Key: field, Value: window})
	}
	if withCursor && q.After != nil {
		after := bson.D{{Key: field, Value: bson.D{{Key: "$gt", Value: q.After.At.UTC()}}}}
		if oid, err := primitive.ObjectIDFromHex(q.After.ID); err == nil {
			f = append(f, bson.E{Key: "$or", Value: bson.A{after, bson.D{{Key: "_id", Value: bson.D{{Key: "$gt", Value: oid}}}}}})
		} else {
			f = append(f, after[0])
		}
	}
	if !byDevice {
		if q.SourceKey != "" {
			f = append(f, bson.E{Key: "sourceKey", Value: q.SourceKey})
		}
		if q.DeviceKey != "" {
			f = append(f, bson.E{Key: "deviceKey", Value: q.DeviceKey})
		}
	}
	if q.HasDeviceRange() { // the simple collation: byte order, as store.EventQuery says
		f = append(f, bson.E{Key: "deviceKey", Value: bson.D{{Key: "$gte", Value: q.DeviceFrom}, {Key: "$lte", Value: q.DeviceTo}}})
	}
	switch q.State {
	case outbox.StatePending:
		f = append(f, pendingFilter()...)
	case outbox.StateFailed:
		f = append(f, parkedFilter()...)
	case outbox.StateSynced:
		f = append(f, bson.E{Key: "syncedAt", Value: bson.D{{Key: "$type", Value: "date"}}})
	}
	return f, bson.D{{Key: field, Value: 1}, {Key: "_id", Value: 1}}
}

// parkedFilter matches parked originals: not synced, with a syncFailure
// category (type-bracketed, so the reconciler index serves it).
func parkedFilter() bson.D {
	return bson.D{{Key: "syncedAt", Value: nil}, {Key: "syncFailure.category", Value: bson.D{{Key: "$type", Value: "string"}}}}
}

// ListEvents runs eventQueryFilter with one Find, without payloads.
func (s *Store) ListEvents(ctx context.Context, q store.EventQuery) ([]*outbox.Event, error) {
	if err := q.Validate(); err != nil {
		return nil, err
	}
	if q.Limit <= 0 {
		return nil, fmt.Errorf("invalid EventQuery.Limit %d: must be positive", q.Limit)
	}
	ctx, cancel := s.opctx(ctx)
	defer cancel()
	filter, sort := eventQueryFilter(q, true)
	cur, err := s.events.Find(ctx, filter, findOptions(ctx).SetSort(sort).SetLimit(int64(q.Limit)).
		SetProjection(bson.D{{Key: "payload", Value: 0}}))
	if err != nil {
		return nil, wrap(err, "listing originals")
	}
	var docs []eventDoc
	if err := cur.All(ctx, &docs); err != nil {
		return nil, wrap(err, "listing originals")
	}
	out := make([]*outbox.Event, 0, len(docs))
	for i := range docs {
		ev, err := docs[i].event()
		if err != nil {
			return nil, fmt.Errorf("error listing originals: %w", err)
		}
		ev.Payload = nil
		out = append(out, ev)
	}
	return out, nil
}

// CountEvents counts with eventQueryFilter, served by the same index.
func (s *Store) CountEvents(ctx context.Context, q store.EventQuery) (int64, error) {
	if err := q.Validate(); err != nil {
		return 0, err
	}
	ctx, cancel := s.opctx(ctx)
	defer cancel()
	filter, _ := eventQueryFilter(q, false)
	n, err := s.events.CountDocuments(ctx, filter)
	if err != nil {
		return 0, wrap(err, "counting originals")
	}
	return n, nil
}

// Redrive is one UpdateMany on the parked originals of ids.
func (s *Store) Redrive(ctx context.Context, ids []string) (int64, error) {
	oids := objectIDs(ids)
	if len(oids) == 0 {
		return 0, nil
	}
	ctx, cancel := s.opctx(ctx)
	defer cancel()
	filter := append(bson.D{{Key: "_id", Value: idsIn(oids)}}, parkedFilter()...)
	res, err := s.events.UpdateMany(ctx, filter, bson.D{{Key: "$set", Value: bson.D{
		{Key: "syncFailure", Value: nil}, {Key: "lastRequeuedAt", Value: nil}, {Key: "requeueCount", Value: int64(0)},
	}}})
	if err != nil {
		return 0, wrap(err, "redriving %d parked originals", len(oids))
	}
	return res.ModifiedCount, nil
}
