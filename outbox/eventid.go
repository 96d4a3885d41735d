package outbox

import (
	"crypto/rand"
	"encoding/binary"
	"encoding/hex"
	"sync/atomic"
	"time"
)

// An event id is a MongoDB ObjectID in hex, generated here rather than by
// the MongoDB driver so that this package holds no driver code: the
// MongoDB store reads it back as its documents' _id (ObjectIDFromHex), the
// SQLite store keeps the text. The 12 bytes follow the ObjectID
// specification: 4 bytes of Unix seconds (big-endian), 5 random bytes
// drawn once per process, and a 3-byte counter that starts at a random
// value and goes up by one per id (wrapping at 2^24).
var (
	eventIDProcess = func() (b [5]byte) {
		_, _ = rand.Read(b[:]) // crypto/rand.Read does not fail (Go 1.24)
		return b
	}()
	eventIDCounter = func() *atomic.Uint32 {
		var b [4]byte
		_, _ = rand.Read(b[:])
		c := new(atomic.Uint32)
		c.Store(binary.BigEndian.Uint32(b[:]))
		return c
	}()
)

// NewEventID returns a new event id: an ObjectID in hex (24 lower-case hex
// digits), unique across processes and machines, whose first 8 digits are
// its creation time in Unix seconds, so ids sort by creation second.
func NewEventID() string {
	var b [12]byte
	binary.BigEndian.PutUint32(b[0:4], uint32(time.Now().Unix()))
	copy(b[4:9], eventIDProcess[:])
	c := eventIDCounter.Add(1)
	b[9], b[10], b[11] = byte(c>>16), byte(c>>8), byte(c)
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
