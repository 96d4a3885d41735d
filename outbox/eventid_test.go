package outbox_test

import (
	"bytes"
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
// creation second and 8 random bytes (no process bytes, no counter: one
// id tells nothing of the next), and never repeat, also when generated
// concurrently.
func TestNewEventID(t *testing.T) {
	t.Parallel()

	t.Run("ObjectIDWithCreationTime", func(t *testing.T) {
		t.Parallel()
		before := time.Now().Truncate(time.Second)
		id := outbox.NewEventID()
		after := time.Now()
		require.True(t, outbox.IsEventID(id), id)
		oid, err := primitive.ObjectIDFromHex(id)
		require.NoError(t, err)
		require.Equal(t, id, oid.Hex())
		require.False(t, oid.Timestamp().Before(before), "%s before %s", oid.Timestamp(), before)
		require.False(t, oid.Timestamp().After(after), "%s after %s", oid.Timestamp(), after)
	})

	t.Run("Unguessable", func(t *testing.T) {
		t.Parallel()
		// No bytes shared with the next id, no counter: 64 random bits.
		a, err := hex.DecodeString(outbox.NewEventID())
		require.NoError(t, err)
		b, err := hex.DecodeString(outbox.NewEventID())
		require.NoError(t, err)
		require.NotEqual(t, a[4:9], b[4:9], "no per-process bytes")
		require.NotEqual(t, a[9:], b[9:])
		same := 0
		for i := 4; i < 12; i++ {
			if a[i] == b[i] {
				same++
			}
		}
		require.Less(t, same, 5, "random bytes, not a counter")
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
					require.LessOrEqual(t, bytes.Compare([]byte(list[i-1][:8]), []byte(id[:8])), 0)
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
