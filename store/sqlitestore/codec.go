package sqlitestore

import (
	"database/sql"
	"encoding/json"
	"fmt"
	"strconv"
	"time"
	"unicode/utf8"

	"github.com/outboxd/outboxd/store"
)

// Times are stored as INTEGER Unix milliseconds (UTC): a time read back is
// the one written, truncated to the millisecond, as the port requires.

// millis returns t in Unix milliseconds.
func millis(t time.Time) int64 { return t.UnixMilli() }

// nullMillis returns t in Unix milliseconds, or NULL for nil.
func nullMillis(t *time.Time) sql.NullInt64 {
	if t == nil {
		return sql.NullInt64{}
	}
	return sql.NullInt64{Int64: t.UnixMilli(), Valid: true}
}

// nullText returns s, or NULL for "" (a traceparent: NULL while tracing is
// off).
func nullText(s string) sql.NullString { return sql.NullString{String: s, Valid: s != ""} }

// fromMillis returns the UTC time of Unix milliseconds ms.
func fromMillis(ms int64) time.Time { return time.UnixMilli(ms).UTC() }

// fromNullMillis returns the time of a nullable millisecond column.
func fromNullMillis(v sql.NullInt64) *time.Time {
	if !v.Valid {
		return nil
	}
	t := fromMillis(v.Int64)
	return &t
}

// entryID formats an outbox seq as an entry id: 20 decimal digits, zero
// padded, so ids sort as strings in seq order (int64 has at most 19 digits).
func entryID(seq int64) string { return fmt.Sprintf("%020d", seq) }

// parseEntryID returns the seq of an entry id.
func parseEntryID(id string) (int64, error) {
	seq, err := strconv.ParseInt(id, 10, 64)
	if err != nil || seq < 0 {
		return 0, fmt.Errorf("invalid outbox entry id %q: not a sequence number", id)
	}
	return seq, nil
}

// position returns the feed position of seq: the seq in decimal ASCII.
func position(seq int64) store.Position { return store.Position(strconv.FormatInt(seq, 10)) }

// parsePosition returns the seq of a feed position; a position that is not
// a decimal seq is lost (it cannot come from this store).
func parsePosition(p store.Position) (int64, error) {
	seq, err := strconv.ParseInt(string(p), 10, 64)
	if err != nil || seq < 0 {
		return 0, fmt.Errorf("%w: %q is not a position of the SQLite store (a decimal sequence number)", store.ErrPositionLost, p)
	}
	return seq, nil
}

// jsonArray encodes ids as a JSON array, the one parameter of the
// "IN (SELECT value FROM json_each(?))" lists: one prepared statement serves
// any number of ids, and no list meets SQLite's parameter limit. JSON
// carries UTF-8 only, so a string that is not valid UTF-8 is an error (the
// writer accepts only UTF-8 keys, and ids are ASCII).
func jsonArray(ids []string) (string, error) {
	for _, id := range ids {
		if !utf8.ValidString(id) {
			return "", fmt.Errorf("invalid id or key %q: not UTF-8", id)
		}
	}
	b, err := json.Marshal(ids)
	if err != nil { // valid strings only: cannot fail
		return "", err
	}
	return string(b), nil
}

// chunks splits ids into slices of at most n.
func chunks(ids []string, n int) [][]string {
	var out [][]string
	for len(ids) > n {
		out = append(out, ids[:n])
		ids = ids[n:]
	}
	if len(ids) > 0 {
		out = append(out, ids)
	}
	return out
}
