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
// creation second, share the process's random bytes and count up, and
// never repeat, also when generated concurrently.
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

	t.Run("ProcessBytesAndCounter", func(t *testing.T) {
		t.Parallel()
		a, err := hex.DecodeString(outbox.NewEventID())
		require.NoError(t, err)
		b, err := hex.DecodeString(outbox.NewEventID())
		require.NoError(t, err)
		require.Equal(t, a[4:9], b[4:9], "one random value per process")
		counter := func(id []byte) uint32 { return uint32(id[9])<<16 | uint32(id[10])<<8 | uint32(id[11]) }
		// Other subtests draw ids concurrently, so b's counter is at least
		// one past a's (modulo 2^24).
		require.NotZero(t, (counter(b)-counter(a))&0xffffff)
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

// TestDependencies: outbox holds no driver code (issue 19): neither its
// files nor anything they import pull in a database or Redis driver.
func TestDependencies(t *testing.T) {
	t.Parallel()
	testkit.RequireNoDeps(t, "github.com/outboxd/outboxd/outbox",
		"go.mongodb.org/mongo-driver", "github.com/redis/go-redis", "github.com/jackc/pgx",
		"modernc.org/sqlite", "github.com/pressly/goose", "github.com/256dpi/lungo")
}
