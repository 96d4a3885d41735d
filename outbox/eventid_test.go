package outbox_test

import (
	"encoding/binary"
	"encoding/hex"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.mongodb.org/mongo-driver/bson/primitive"

	"github.com/outboxd/outboxd/internal/testkit"
	"github.com/outboxd/outboxd/outbox"
)

// TestNewEventID: the ids outbox generates itself are ObjectIDs as the
// MongoDB driver reads them (the MongoDB store's _id), carry their
// creation time (seconds, then the fraction of the second in 1/65,536 s)
// and 6 random bytes (no process bytes, no counter: one id tells nothing of
// the next), sort by creation time, and never repeat, also when generated
// concurrently.
func TestNewEventID(t *testing.T) {
	t.Parallel()

	t.Run("ObjectIDWithCreationTime", func(t *testing.T) {
		t.Parallel()
		before := time.Now()
		id := outbox.NewEventID()
		after := time.Now()
		require.True(t, outbox.IsEventID(id), id)
		oid, err := primitive.ObjectIDFromHex(id)
		require.NoError(t, err)
		require.Equal(t, id, oid.Hex())
		require.False(t, oid.Timestamp().Before(before.Truncate(time.Second)), "%s before %s", oid.Timestamp(), before)
		require.False(t, oid.Timestamp().After(after), "%s after %s", oid.Timestamp(), after)
		// The fraction of the second, to 1/65,536 s.
		b, err := hex.DecodeString(id)
		require.NoError(t, err)
		at := oid.Timestamp().Add(time.Duration(binary.BigEndian.Uint16(b[4:6])) * time.Second / 65536)
		require.False(t, at.Before(before.Add(-time.Second/65536)), "%s before %s", at, before)
		require.False(t, at.After(after), "%s after %s", at, after)
	})

	t.Run("Unguessable", func(t *testing.T) {
		t.Parallel()
		// No bytes shared with the next id, no counter: 48 random bits
		// after the time.
		a, err := hex.DecodeString(outbox.NewEventID())
		require.NoError(t, err)
		b, err := hex.DecodeString(outbox.NewEventID())
		require.NoError(t, err)
		require.NotEqual(t, a[6:9], b[6:9], "no per-process bytes")
		require.NotEqual(t, a[9:], b[9:])
		same := 0
		for i := 6; i < 12; i++ {
			if a[i] == b[i] {
				same++
			}
		}
		require.Less(t, same, 4, "random bytes, not a counter")
	})

	t.Run("SortByCreationTime", func(t *testing.T) {
		t.Parallel()
		// Ids drawn one after another sort as drawn but for those of one
		// 1/65,536 s: what keeps the stores' id indexes appending at their
		// end. Drawn until 50 slots have passed (about 0.8 ms, however
		// slowly a loaded machine runs this loop), within a deadline.
		ids := []string{outbox.NewEventID()}
		slots := 1
		for deadline := time.Now().Add(10 * time.Second); slots < 50 && time.Now().Before(deadline); {
			id := outbox.NewEventID()
			prev := ids[len(ids)-1]
			require.LessOrEqual(t, prev[:12], id[:12], "the time part goes back: %s then %s", prev, id)
			if prev[:12] != id[:12] {
				slots++
			}
			ids = append(ids, id)
		}
		require.Equal(t, 50, slots, "the fraction of the second moves with the clock")
	})

	t.Run("UniqueConcurrently", func(t *testing.T) {
		t.Parallel()
		const goroutines, each = 8, 2000
		ids := make([][]string, goroutines)
		var wg sync.WaitGroup
		for g := range goroutines {
			wg.Go(func() {
				for range each {
					ids[g] = append(ids[g], outbox.NewEventID())
				}
			})
		}
		wg.Wait()
		seen := make(map[string]bool, goroutines*each)
		for _, list := range ids {
			for i, id := range list {
				require.False(t, seen[id], "duplicate id %s", id)
				seen[id] = true
				if i > 0 {
					// One goroutine's ids never go back in time.
					require.LessOrEqual(t, list[i-1][:12], id[:12])
				}
			}
		}
	})
}

// TestDependencies: outbox holds no driver code: neither its
// files nor anything they import pull in a database or Redis driver.
func TestDependencies(t *testing.T) {
	t.Parallel()
	testkit.RequireNoDeps(t, "github.com/outboxd/outboxd/outbox",
		"go.mongodb.org/mongo-driver", "github.com/redis/go-redis", "github.com/jackc/pgx",
		"modernc.org/sqlite", "github.com/pressly/goose", "github.com/256dpi/lungo")
}
