package maintenance_test

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/require"

	"github.com/outboxd/outboxd/internal/maintenance"
	"github.com/outboxd/outboxd/internal/testkit"
	"github.com/outboxd/outboxd/outbox"
	"github.com/outboxd/outboxd/store"
)

// stores are the stores the retention's tests run on: SQLite, and the
// MongoDB store on lungo.
var stores = map[string]func(t *testing.T) store.Store{
	"SQLite": func(t *testing.T) store.Store { return testkit.NewSQLite(t) },
	"Mongo":  func(t *testing.T) store.Store { return testkit.NewMongo(t, nil) },
}

// TestRetentionDeletesWhatIsOld: one round deletes the dispatched entries
// past the outbox's retention and the synced originals past theirs (their
// type's first, else their source's, else the global one; 0 keeps them),
// and keeps the rest: the younger ones, the pending ones, those of a kept
// type.
func TestRetentionDeletesWhatIsOld(t *testing.T) {
	t.Parallel()
	for kind, open := range stores {
		t.Run(kind, func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			st := open(t)
			streamName := testkit.Name("stream")
			now := time.Now()
			type original struct {
				name, typ, source string
				age               time.Duration
				synced, kept      bool
			}
			originals := []original{
				{"old reading of a: global", "reading", "a", 30 * time.Hour, true, false},
				{"young reading of a", "reading", "a", 2 * time.Hour, true, true},
				{"young short of a: its type's", "short", "a", 2 * time.Hour, true, false},
				{"old audit of a: kept forever", "audit", "a", 30 * time.Hour, true, true},
				{"old reading of b: its source's", "reading", "b", 30 * time.Hour, true, true},
				{"young short of b: its type's before its source's", "short", "b", 2 * time.Hour, true, false},
				{"old pending reading of a", "reading", "a", 30 * time.Hour, false, true},
				{"older reading of b", "reading", "b", 50 * time.Hour, true, false},
			}
			ids := make([]string, len(originals))
			var synced []string
			for i, o := range originals {
				w := outbox.NewWriter(st, &outbox.WriterConfig{Stream: streamName, Now: func() time.Time { return now.Add(-o.age) }})
				res, err := w.Write(ctx, []outbox.Input{{SourceKey: o.source, DeviceKey: fmt.Sprintf("d%d", i), Type: o.typ, OccurredAt: "2026-11-01T10:00:00Z"}})
				require.NoError(t, err)
				ids[i] = res[0].ID
				if o.synced {
					synced = append(synced, res[0].ID)
				}
			}
			// The newest original, which a store may keep.
			_, err := outbox.NewWriter(st, &outbox.WriterConfig{Stream: streamName}).Write(ctx, []outbox.Input{{SourceKey: "n", DeviceKey: "n", OccurredAt: "2026-11-01T10:00:00Z"}})
			require.NoError(t, err)
			entries, err := st.Undispatched(ctx, streamName, store.Partition{}, "", 100)
			require.NoError(t, err)
			entryIDs := make([]string, len(entries))
			for i, e := range entries {
				entryIDs[i] = e.ID
			}
			lease, err := st.AcquireLease(ctx, streamName, "owner", now, time.Minute)
			require.NoError(t, err)
			require.NoError(t, st.MarkDispatched(ctx, lease, entryIDs[:1], now.Add(-30*time.Hour)))
			require.NoError(t, st.MarkDispatched(ctx, lease, entryIDs[1:], now))
			_, err = st.MarkSynced(ctx, synced, now)
			require.NoError(t, err)

			deleted := prometheus.NewCounter(prometheus.CounterOpts{Name: "deleted"})
			reg := prometheus.NewRegistry()
			reg.MustRegister(deleted)
			r := maintenance.NewRetention(maintenance.RetentionConfig{
				Store: st, Interval: time.Hour, Outbox: 24 * time.Hour, Events: 24 * time.Hour,
				Types: map[string]time.Duration{"short": time.Hour, "audit": 0}, Sources: map[string]time.Duration{"b": 48 * time.Hour},
				Chunk: 1, Max: 10, Now: func() time.Time { return now }, Deleted: deleted,
			})
			r.Round(ctx)

			got, err := st.LoadEvents(ctx, ids)
			require.NoError(t, err)
			want := 0
			for i, o := range originals {
				_, ok := got[ids[i]]
				require.Equal(t, o.kept, ok, o.name)
				if !o.kept {
					want++
				}
			}
			require.Equal(t, float64(want), testkit.Metric(t, reg, "deleted"))
			left, err := st.OutboxEntries(ctx, entries[0].EventID)
			require.NoError(t, err)
			require.Empty(t, left, "the entry dispatched before the outbox's retention")
			left, err = st.OutboxEntries(ctx, entries[1].EventID)
			require.NoError(t, err)
			require.Len(t, left, 1, "an entry dispatched now")
		})
	}
}

// countingStore counts the retention's deletions, and fails them.
type countingStore struct {
	store.Store
	dispatched, synced atomic.Int64
}

func (c *countingStore) DeleteDispatched(context.Context, time.Time) (int64, error) {
	c.dispatched.Add(1)
	return 0, fmt.Errorf("error deleting dispatched outbox entries: %w", store.ErrUnavailable)
}

func (c *countingStore) DeleteSynced(context.Context, time.Time, store.SyncedScope, int) (int64, error) {
	c.synced.Add(1)
	return 0, fmt.Errorf("error deleting synced originals: %w", store.ErrUnavailable)
}

// TestRetentionRunsWhileStarted: a started retention runs a round every
// interval, a failed one included (the next goes on), each retention of
// originals in turn; after Stop none runs, and it starts again.
func TestRetentionRunsWhileStarted(t *testing.T) {
	t.Parallel()
	st := &countingStore{Store: testkit.NewSQLite(t)}
	r := maintenance.NewRetention(maintenance.RetentionConfig{
		Store: st, Interval: 5 * time.Millisecond, Outbox: time.Hour, Events: time.Hour,
		Types: map[string]time.Duration{"t": time.Hour}, Chunk: 10, Max: 100,
	})
	ctx := context.Background()
	stop := maintenance.StartAll(ctx, r)
	require.Eventually(t, func() bool { return st.dispatched.Load() >= 3 }, 10*time.Second, time.Millisecond, "rounds run, failed ones too")
	stop()
	rounds := st.dispatched.Load()
	testkit.Never(t, func() bool { return st.dispatched.Load() != rounds }, 100*time.Millisecond, 5*time.Millisecond, "no round after Stop")
	// A round Stop cut short may have ended between its passes: the
	// passes of a round are counted on a round of their own.
	synced := st.synced.Load()
	r.Round(ctx)
	require.Equal(t, rounds+1, st.dispatched.Load())
	require.Equal(t, synced+2, st.synced.Load(), "each round: the type's retention, then the global one")
	rounds++
	r.Stop() // again: nothing

	r.Start(ctx)
	require.Eventually(t, func() bool { return st.dispatched.Load() > rounds }, 10*time.Second, time.Millisecond, "started again")
	r.Stop()
}
