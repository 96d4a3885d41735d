package sqlitestore

import (
	"context"

	"github.com/outboxd/outboxd/outbox"
)

// qOutboxEntries reads the entries of one original, in seq order. Index
// outbox_event (migration 00003), which holds the seq.
const qOutboxEntries = `SELECT ` + entryColumns + ` FROM "{outbox}" INDEXED BY "{outbox}_event"
	WHERE event_id = ? ORDER BY seq`

// OutboxEntries returns the outbox entries of the original eventID, in seq
// order, from index outbox_event.
func (s *Store) OutboxEntries(ctx context.Context, eventID string) ([]outbox.Entry, error) {
	const what = "reading the outbox entries of an original"
	rows, err := s.read.QueryContext(ctx, s.q.outboxEntries, eventID)
	if err != nil {
		return nil, s.fail(what, err)
	}
	entries, _, err := scanEntries(rows)
	if err != nil {
		return nil, s.fail(what, err)
	}
	return entries, nil
}
