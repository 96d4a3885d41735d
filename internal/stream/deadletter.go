package stream

import (
	"cmp"
	"context"
	"strconv"
	"time"

	"github.com/outboxd/outboxd/outbox"
)

// The fields of a dead letter in the dead-letter stream: one set, written
// by the worker (Group.Finish) and read by the operator actions (Decode).
const (
	fieldCategory   = "category"
	fieldCode       = "code"
	fieldError      = "error"
	fieldEntryID    = "entryId"
	fieldEventID    = "eventId"
	fieldStream     = "stream"
	fieldGroup      = "group"
	fieldConsumer   = "consumer"
	fieldDeliveries = "deliveries"
	fieldAt         = "at"
	// fieldReasonV1 is the field that held the code in dead letters written
	// before code existed (outboxd 0.x before); Decode reads it
	// when code is absent.
	fieldReasonV1 = "reason"
)

// DeadLetter is one entry of a dead-letter stream: a stream entry the
// worker gave up on, with why and where. It is the one record both sides
// use: the worker writes it (Group.Finish encodes it), the operator reads
// it (Decode). Times are UTC.
type DeadLetter struct {
	// ID is the dead letter's own id in the dead-letter stream (set by
	// Decode; Redis chooses it when the worker writes it).
	ID string
	// Category is outbox.CategoryPoison (the record kept failing),
	// outbox.CategoryNonRetryable (it can never succeed) or
	// outbox.CategoryInfrastructure (given up for a cause outside it).
	Category string
	// Code is the failure's code, from a bounded set: the code of the
	// original's syncFailure and the label of
	// outboxd_worker_dead_letters_total ("projection_failed", "trimmed",
	// "postgres_22P02", …).
	Code string
	// Error is the failure's message.
	Error string
	// EntryID is the id of the stream entry that failed; EventID names its
	// original ("" when the entry named none: an unreadable message).
	EntryID, EventID string
	// Stream, Group and Consumer say where the entry was consumed (filled
	// in by Group.Finish).
	Stream, Group, Consumer string
	// Deliveries counts the entry's failed deliveries (0 for a record
	// dead-lettered at its first look: an unreadable or trimmed entry).
	Deliveries int64
	// At is when it was dead-lettered.
	At time.Time
	// Payload is the failed entry's payload field, as it was.
	Payload string
}

// Encode returns the dead letter's fields for XADD (ID is not one).
func (d DeadLetter) Encode() []any {
	return []any{
		fieldCategory, d.Category, fieldCode, d.Code, fieldError, d.Error,
		fieldEntryID, d.EntryID, fieldEventID, d.EventID,
		fieldStream, d.Stream, fieldGroup, d.Group, fieldConsumer, d.Consumer,
		fieldDeliveries, strconv.FormatInt(d.Deliveries, 10), fieldAt, d.At.UTC().Format(time.RFC3339Nano),
		outbox.PayloadField, d.Payload,
	}
}

// Decode reads the dead letter of e, an entry of a dead-letter stream. A
// field that is absent stays empty; an unreadable time is the entry's own
// (when Redis added it), an unreadable count 0. Dead letters written
// before the code field existed have their code read from the old reason
// field.
func (d *DeadLetter) Decode(e Entry) {
	str := func(k string) string { v, _ := e.Values[k].(string); return v }
	*d = DeadLetter{ID: e.ID, Category: str(fieldCategory), Code: cmp.Or(str(fieldCode), str(fieldReasonV1)),
		Error: str(fieldError), EntryID: str(fieldEntryID), EventID: str(fieldEventID), Stream: str(fieldStream),
		Group: str(fieldGroup), Consumer: str(fieldConsumer), Payload: str(outbox.PayloadField)}
	d.Deliveries, _ = strconv.ParseInt(str(fieldDeliveries), 10, 64)
	if at, err := time.Parse(time.RFC3339Nano, str(fieldAt)); err == nil {
		d.At = at.UTC()
	} else if at, ok := IDTime(e.ID); ok {
		d.At = at
	}
}

func decodeDeadLetter(e Entry) DeadLetter {
	var d DeadLetter
	d.Decode(e)
	return d
}

// DeadLetterEventID returns the event id a dead letter names without
// decoding the rest (for scans).
func DeadLetterEventID(e Entry) string {
	id, _ := e.Values[fieldEventID].(string)
	return id
}

// DeadLetters returns at most n dead letters of keys' dead-letter stream
// that follow the entry id after ("" from the oldest), oldest first.
func (c *Client) DeadLetters(ctx context.Context, keys Keys, after string, n int) ([]DeadLetter, error) {
	start := "-"
	if after != "" {
		start = "(" + after
	}
	msgs, err := c.rdb.XRangeN(ctx, keys.DLQ(), start, "+", int64(n)).Result()
	if err != nil {
		return nil, err
	}
	out := make([]DeadLetter, len(msgs))
	for i, e := range entries(msgs) {
		out[i] = decodeDeadLetter(e)
	}
	return out, nil
}

// DeadLettersByID reads the dead letters of ids in one round trip; an id
// without an entry is nil. Every id must be an entry id (IDTime).
func (c *Client) DeadLettersByID(ctx context.Context, keys Keys, ids []string) ([]*DeadLetter, error) {
	es, err := c.byID(ctx, keys.DLQ(), ids)
	if err != nil {
		return nil, err
	}
	out := make([]*DeadLetter, len(ids))
	for i, e := range es {
		if e.Values != nil {
			d := decodeDeadLetter(e)
			out[i] = &d
		}
	}
	return out, nil
}

// DeleteDeadLetters removes the dead letters of ids.
func (c *Client) DeleteDeadLetters(ctx context.Context, keys Keys, ids []string) error {
	if len(ids) == 0 {
		return nil
	}
	return c.rdb.XDel(ctx, keys.DLQ(), ids...).Err()
}
