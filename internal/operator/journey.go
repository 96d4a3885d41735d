package operator

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/outboxd/outboxd/internal/readmodel"
	"github.com/outboxd/outboxd/internal/stream"
	"github.com/outboxd/outboxd/outbox"
	"github.com/outboxd/outboxd/store"
)

// Bounds of a journey's look into the streams.
const (
	// JourneyScanMax is the most entries a journey reads of the stream, of
	// its replay lane and of the dead-letter stream: the newest first, down
	// to the original's creation. When it stops there first, older entries of the event may
	// exist and the answer says Partial.
	JourneyScanMax = 10000
	// journeySkew widens the scan to entries this much older than the
	// original's createdAt: the writer's clock and Redis's may differ.
	journeySkew = time.Minute
	// journeyRefMax bounds the reference: an id is 24 characters, a key at
	// most 200 bytes, under a named client's namespace (outbox.ClientKey)
	// some more.
	journeyRefMax = len(outbox.ClientKeyPrefix) + outbox.MaxClientNameLength + 1 + outbox.MaxKeyLength
)

// The statuses of a JourneyStreamEntry.
const (
	// EntryWaiting: not delivered to the consumer group yet.
	EntryWaiting = "waiting"
	// EntryPending: delivered and not acknowledged (a worker holds it).
	EntryPending = "pending"
	// EntryAcknowledged: delivered and acknowledged (projected, or found
	// projected already).
	EntryAcknowledged = "acknowledged"
	// EntryDeadLettered: acknowledged by moving it to the dead-letter
	// stream.
	EntryDeadLettered = "dead_lettered"
)

// Journey is what Operator.Journey returns (GET
// /v1/admin/events/{ref}/journey): the path of one original through the
// pipeline, each step with its time.
type Journey struct {
	// MatchedBy says how ref found the original: "id" or "idempotencyKey".
	MatchedBy string          `json:"matchedBy"`
	Original  JourneyOriginal `json:"original"`
	// Outbox are its outbox entries. None once they were removed after
	// dispatch (the outbox's retention).
	Outbox []JourneyOutboxEntry `json:"outbox"`
	Stream JourneyStream        `json:"stream"`
	// ReadModel is its row in PostgreSQL and the statistics row of its
	// day (the default projector's tables).
	ReadModel JourneyReadModel `json:"readModel"`
	// ReadAt is when the journey was read.
	ReadAt time.Time `json:"readAt"`
}

// JourneyOriginal is the original with its payload.
type JourneyOriginal struct {
	EventSummary
	Payload json.RawMessage `json:"payload"`
}

// JourneyOutboxEntry is one outbox entry of the original.
type JourneyOutboxEntry struct {
	ID        string    `json:"id"`
	Stream    string    `json:"stream"`
	CreatedAt time.Time `json:"createdAt"`
	// DispatchedAt is when the dispatcher relayed it (null: not yet).
	DispatchedAt *time.Time `json:"dispatchedAt"`
}

// JourneyStream is what the stream, its replay lane and the dead-letter
// stream hold of the original.
type JourneyStream struct {
	Name  string `json:"name"`
	Group string `json:"group"`
	// Entries are the entries of the stream and of its replay lane that
	// name the original, oldest first.
	Entries []JourneyStreamEntry `json:"entries"`
	// DeadLetters are the dead letters that name it, oldest first.
	DeadLetters []DeadLetter `json:"deadLetters"`
	// Scanned and DLQScanned count the entries read of the stream and its
	// replay lane (at most ScanLimit of each), and of the dead-letter
	// stream (at most ScanLimit), from the newest down to the original's
	// creation.
	Scanned    int `json:"scanned"`
	DLQScanned int `json:"dlqScanned"`
	ScanLimit  int `json:"scanLimit"`
	// Partial is set when a scan stopped at ScanLimit before the
	// original's creation: older entries of it may exist.
	Partial bool `json:"partial"`
}

// JourneyStreamEntry is one stream entry that names the original.
type JourneyStreamEntry struct {
	ID string `json:"id"`
	// Lane is the stream it is in: "live" (the stream) or "replay" (its
	// replay lane, where replays go).
	Lane string `json:"lane"`
	// At is when it was added (the time in its id).
	At     time.Time `json:"at"`
	Origin string    `json:"origin"`
	// Status is waiting, pending, acknowledged or dead_lettered.
	Status string `json:"status"`
	// Deliveries is how often the group delivered it: Redis's count while
	// it is pending, the dead letter's once dead-lettered; 0 when unknown
	// (Redis forgets the count of an acknowledged entry).
	Deliveries int64 `json:"deliveries"`
	// FailedDeliveries are the deliveries the worker counted as the
	// record's failures (its budget), while it is pending.
	FailedDeliveries int64 `json:"failedDeliveries"`
	// Consumer holds a pending entry, idle this long.
	Consumer    string   `json:"consumer,omitempty"`
	IdleSeconds *float64 `json:"idleSeconds,omitempty"`
}

// JourneyReadModel is the original's trace in PostgreSQL.
type JourneyReadModel struct {
	// Row is its row of events (null: not projected).
	Row *readmodel.Row `json:"row"`
	// Stats is the statistics row of its source, device and UTC day (null:
	// none).
	Stats *StatsRow `json:"stats"`
}

// StatsRow is a row of device_daily_stats.
type StatsRow struct {
	SourceKey string `json:"sourceKey"`
	DeviceKey string `json:"deviceKey"`
	// Day is the UTC day, YYYY-MM-DD.
	Day             string    `json:"day"`
	EventCount      int64     `json:"eventCount"`
	FirstOccurredAt time.Time `json:"firstOccurredAt"`
	LastOccurredAt  time.Time `json:"lastOccurredAt"`
}

// Journey returns the path of the original ref names, by its id or else its
// idempotency key: the original, its outbox entries, the stream entries
// and dead letters that name it (a bounded scan, see JourneyScanMax) with
// their delivery state, and its read-model row with its day's statistics.
// It needs Redis and PostgreSQL (ErrNotAvailable otherwise) and changes
// nothing.
func (o *Operator) Journey(ctx context.Context, ref string) (*Journey, error) {
	if err := o.needRedis(); err != nil {
		return nil, err
	}
	if o.cfg.Unchecked == "" { // an unchecked read model is left out
		if err := o.needReadModel(); err != nil {
			return nil, err
		}
	}
	if ref == "" || len(ref) > journeyRefMax {
		return nil, Invalid("ref", "must be an event id or an idempotency key (1 to %d bytes)", journeyRefMax)
	}
	ev, by, err := o.resolve(ctx, ref)
	if err != nil {
		return nil, err
	}
	j := &Journey{MatchedBy: by, ReadAt: o.cfg.Now().UTC(), Outbox: []JourneyOutboxEntry{},
		Original: JourneyOriginal{EventSummary: summaryOf(ev), Payload: payloadOrEmpty(ev.Payload)}}
	entries, err := o.cfg.Store.OutboxEntries(ctx, ev.ID)
	if err != nil {
		return nil, storeErr(fmt.Sprintf("reading the outbox entries of %s", ev.ID), err)
	}
	for _, e := range entries {
		j.Outbox = append(j.Outbox, JourneyOutboxEntry{ID: e.ID, Stream: e.Stream, CreatedAt: e.CreatedAt.UTC(), DispatchedAt: utc(e.DispatchedAt)})
	}
	if j.Stream, err = o.streamJourney(ctx, ev); err != nil {
		return nil, err
	}
	if j.ReadModel, err = o.readModelJourney(ctx, ev); err != nil {
		return nil, err
	}
	return j, nil
}

// resolve finds the original ref names: by id when ref has an id's form
// and such an original exists, else by idempotency key.
func (o *Operator) resolve(ctx context.Context, ref string) (*outbox.Event, string, error) {
	if outbox.IsEventID(ref) {
		got, err := o.cfg.Store.LoadEvents(ctx, []string{ref})
		if err != nil {
			return nil, "", storeErr(fmt.Sprintf("reading original %s", ref), err)
		}
		if l, ok := got[ref]; ok {
			if l.Err != nil {
				return nil, "", l.Err
			}
			return l.Event, "id", nil
		}
	}
	ev, err := o.cfg.Store.EventByKey(ctx, ref)
	if errors.Is(err, store.ErrNotFound) {
		return nil, "", notFound("no original has this id or idempotency key")
	}
	if err != nil {
		return nil, "", storeErr("reading an original by key", err)
	}
	return ev, "idempotencyKey", nil
}

// summaryOf returns the summary of ev (an item of ListEvents).
func summaryOf(ev *outbox.Event) EventSummary {
	return EventSummary{ID: ev.ID, IdempotencyKey: ev.IdempotencyKey, Client: ev.Client, SourceKey: ev.SourceKey,
		DeviceKey: ev.DeviceKey, Type: ev.Type, OccurredAt: ev.OccurredAt.UTC(), CreatedAt: ev.CreatedAt.UTC(),
		State: ev.State(), SyncedAt: utc(ev.SyncedAt), LastRequeuedAt: utc(ev.LastRequeuedAt),
		RequeueCount: ev.RequeueCount, SyncFailure: ev.SyncFailure}
}

// streamJourney scans the stream and the dead-letter stream for ev and
// reads the delivery state of the entries it found.
func (o *Operator) streamJourney(ctx context.Context, ev *outbox.Event) (JourneyStream, error) {
	js := JourneyStream{Name: o.cfg.Stream, Group: o.cfg.Group, ScanLimit: JourneyScanMax,
		Entries: []JourneyStreamEntry{}, DeadLetters: []DeadLetter{}}
	since := ev.CreatedAt.Add(-journeySkew)
	// A message names its original in its payload's JSON; the cheap
	// substring test spares decoding the others.
	names := func(e stream.Entry) bool {
		if !strings.Contains(e.Payload(), ev.ID) {
			return false
		}
		msg, err := e.Message()
		return err == nil && msg.EventID == ev.ID
	}
	// The event's partition holds its entries and its dead letters.
	part := o.keys.Split(o.cfg.Partitions).ForEvent(ev.SourceKey, ev.DeviceKey)
	byLane := map[stream.Keys][]stream.Entry{}
	for _, keys := range []stream.Keys{part, part.ReplayLane()} {
		msgs, scanned, partial, err := o.cfg.Redis.ScanBack(ctx, keys.Stream(), since, JourneyScanMax, names)
		if err != nil {
			return js, redisErr("scanning the stream "+keys.Stream(), err)
		}
		byLane[keys] = msgs
		js.Scanned += scanned
		js.Partial = js.Partial || partial
	}
	dlqMsgs, dlqScanned, dlqPartial, err := o.cfg.Redis.ScanBack(ctx, part.DLQ(), since, JourneyScanMax, func(e stream.Entry) bool {
		return stream.DeadLetterEventID(e) == ev.ID
	})
	if err != nil {
		return js, redisErr("scanning the dead-letter stream", err)
	}
	js.DLQScanned, js.Partial = dlqScanned, js.Partial || dlqPartial
	now := o.cfg.Now()
	deadByEntry := map[string]DeadLetter{}
	for _, m := range dlqMsgs {
		var d stream.DeadLetter
		d.Decode(m)
		dl := deadLetterOf(d, now)
		dl.Original = ev.State()
		js.DeadLetters = append(js.DeadLetters, dl)
		deadByEntry[dl.Stream+" "+dl.EntryID] = dl // entry ids of two streams may be equal
	}
	for keys, msgs := range byLane {
		entries := make([]JourneyStreamEntry, len(msgs))
		for i, m := range msgs {
			e := JourneyStreamEntry{ID: m.ID, Lane: keys.Lane()}
			e.At, _ = stream.IDTime(m.ID)
			if msg, err := m.Message(); err == nil {
				e.Origin = string(msg.Origin)
			}
			entries[i] = e
		}
		if err := o.deliveries(ctx, keys, entries, deadByEntry); err != nil {
			return js, err
		}
		js.Entries = append(js.Entries, entries...)
	}
	slices.SortStableFunc(js.Entries, func(a, b JourneyStreamEntry) int {
		return cmp.Or(a.At.Compare(b.At), cmp.Compare(a.Lane, b.Lane), strings.Compare(a.ID, b.ID))
	})
	return js, nil
}

// deliveries fills the delivery state of entries of the stream of keys:
// dead-lettered with the dead letter's count, waiting when the group has
// not read it, pending with Redis's count and the worker's failure count,
// acknowledged otherwise. One round trip.
func (o *Operator) deliveries(ctx context.Context, keys stream.Keys, entries []JourneyStreamEntry, dead map[string]DeadLetter) error {
	if len(entries) == 0 {
		return nil
	}
	ids := make([]string, len(entries))
	for i, e := range entries {
		ids[i] = e.ID
	}
	ds, err := o.cfg.Redis.Deliveries(ctx, keys, ids)
	if err != nil {
		return redisErr("reading the deliveries", err)
	}
	for i := range entries {
		e, d := &entries[i], ds[i]
		if dl, ok := dead[keys.Stream()+" "+e.ID]; ok {
			e.Status, e.Deliveries = EntryDeadLettered, dl.Deliveries
			continue
		}
		switch {
		case !d.Delivered:
			e.Status = EntryWaiting
		case !d.Pending:
			e.Status = EntryAcknowledged
		default:
			idle := d.Idle.Seconds()
			e.Status, e.Deliveries, e.FailedDeliveries, e.Consumer, e.IdleSeconds = EntryPending, d.Deliveries, d.Failed, d.Consumer, &idle
		}
	}
	return nil
}

// readModelJourney reads ev's row (by event id, else by idempotency key:
// a row projected from an earlier original of the key) and the statistics
// row of its day, in one read-only transaction.
func (o *Operator) readModelJourney(ctx context.Context, ev *outbox.Event) (JourneyReadModel, error) {
	var rm JourneyReadModel
	lookup, ok := o.cfg.ReadModel.(LookupReadModel) // false for nil
	if !ok {
		return rm, nil // a read model the journey cannot show
	}
	row, stats, err := lookup.Lookup(ctx, ev.ID, ev.IdempotencyKey, readmodel.KeyOf(ev))
	if err != nil {
		return rm, pgErr("reading the read model", err)
	}
	rm.Row = row
	if stats != nil {
		rm.Stats = &StatsRow{SourceKey: stats.SourceKey, DeviceKey: stats.DeviceKey, Day: stats.Day.Format(time.DateOnly),
			EventCount: stats.EventCount, FirstOccurredAt: stats.FirstOccurredAt, LastOccurredAt: stats.LastOccurredAt}
	}
	return rm, nil
}
