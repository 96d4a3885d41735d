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
// (big-endian), as the ObjectID specification has them, and 8 bytes from
// crypto/rand, drawn anew for each id: unlike the specification's
// per-process bytes and counter, nobody can guess one event's id from
// another's (ids are what GET /v1/events/{id} serves), and ids still sort
// by creation second. Two ids of one second collide with a chance of
// about n²/2⁶⁵ for n ids in that second.

// NewEventID returns a new event id: an ObjectID in hex (24 lower-case hex
// digits) whose first 8 digits are its creation time in Unix seconds (ids
// sort by creation second) and whose other 16 are random.
func NewEventID() string {
	var b [12]byte
	binary.BigEndian.PutUint32(b[0:4], uint32(time.Now().Unix()))
	_, _ = rand.Read(b[4:]) // crypto/rand.Read does not fail (Go 1.24)
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
