package outbox

import (
	"crypto/rand"
	"encoding/binary"
	"encoding/hex"
	"time"
)

// An event id is a MongoDB ObjectID in hex, generated here rather than by
// the MongoDB driver so that this package holds no driver code: the
// MongoDB store reads it back as its documents' _id (ObjectIDFromHex), the
// SQLite store keeps the text. Its 12 bytes are 4 bytes of Unix seconds
// (big-endian), as the ObjectID specification has them, 2 bytes of the
// fraction of that second (in 1/65,536 s, about 15 µs), and 6 bytes from
// crypto/rand, drawn anew for each id: unlike the specification's
// per-process bytes and counter, nobody can guess one event's id from
// another's (ids are what GET /v1/events/{id} serves: 48 random bits beside
// a time to 15 µs), and ids sort by creation time to 15 µs.
//
// Sorting by time is what the stores' id indexes need: the originals of one
// commit get ids next to each other at the end of the index (SQLite's
// events_id and outbox_event, MongoDB's _id), so a commit of n events
// writes about n/100 index pages instead of up to one page per event (with
// whole seconds before the random bytes, a commit's ids scattered over the
// last second's part of the index). Two ids of one 1/65,536 s collide with
// a chance of about k²/2⁴⁹ for k ids in that slot; a collision fails the
// store's unique index and the writer runs the transaction again with new
// ids.

// NewEventID returns a new event id: an ObjectID in hex (24 lower-case hex
// digits) whose first 12 digits are its creation time (8 of Unix seconds, 4
// of the fraction of the second in 1/65,536 s) and whose other 12 are
// random.
func NewEventID() string {
	var b [12]byte
	now := time.Now()
	binary.BigEndian.PutUint32(b[0:4], uint32(now.Unix()))
	binary.BigEndian.PutUint16(b[4:6], uint16(uint64(now.Nanosecond())<<16/1e9))
	_, _ = rand.Read(b[6:]) // crypto/rand.Read does not fail (Go 1.24)
	return hex.EncodeToString(b[:])
}

// IsEventID reports whether s has the form of an event id (24 lower-case
// hex digits).
func IsEventID(s string) bool {
	if len(s) != 24 {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if (c < '0' || c > '9') && (c < 'a' || c > 'f') {
			return false
		}
	}
	return true
}
