package dispatcher_test

import (
	"context"
	"fmt"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/require"
	"go.mongodb.org/mongo-driver/bson"

	"github.com/outboxd/outboxd/internal/mongoseam"
	"github.com/outboxd/outboxd/outbox"
	"github.com/outboxd/outboxd/store"
	"github.com/outboxd/outboxd/store/mongostore"
	"github.com/outboxd/outboxd/store/sqlitestore"
)

// TestSweepRelaysEntriesTheFeedMissed makes an entry of the stream appear
// behind the feed's position without a feed event (it is written for
// another stream and moved over), as an oplog hole or an undecodable change
// event would leave it: the periodic sweep relays it.
func TestSweepRelaysEntriesTheFeedMissed(t *testing.T) {
	t.Parallel()
	for _, kind := range kinds {
		t.Run(kind, func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			b := setup(t, &setupOpts{kind: kind})
			reg := prometheus.NewRegistry()
			cfg := b.config()
			cfg.Registerer = reg
			cfg.SweepInterval, cfg.SweepMinAge = 50*time.Millisecond, time.Millisecond
			d := b.start(cfg)
			b.waitRelayed(b.write(2, 2), 10*time.Second)

			other := outbox.NewWriter(b.st, &outbox.WriterConfig{Stream: b.stream + ":elsewhere"})
			res, err := other.Write(ctx, []outbox.Input{{SourceKey: "s", DeviceKey: "hidden", OccurredAt: "2026-11-01T10:00:00Z"}})
			require.NoError(t, err)
			b.waitRelayedOwn(b.write(1, 1)) // the feed moves past the hidden entry
			switch st := b.st.(type) {
			case *mongostore.Store:
				_, err = mongoseam.Database(st).Collection(mongostore.OutboxCollection).UpdateOne(ctx,
					bson.M{"stream": b.stream + ":elsewhere"}, bson.M{"$set": bson.M{"stream": b.stream}})
			case *sqlitestore.Store:
				_, err = st.DB().ExecContext(ctx, `UPDATE outbox SET stream = ? WHERE stream = ?`, b.stream, b.stream+":elsewhere")
			}
			require.NoError(t, err)

			b.waitRelayed([]string{res[0].ID}, 10*time.Second)
			require.Eventually(t, func() bool { return counterValue(t, reg, "outboxd_dispatcher_swept_total") >= 1 },
				10*time.Second, 5*time.Millisecond, "counted as swept")
			require.True(t, d.Stats().Leader)
		})
	}
}

// TestSweepDoesNotRelayTwice runs the sweep as often as it can while the
// feed is still delivering a backlog: what the sweep relays the feed skips,
// so the stream holds each entry once.
func TestSweepDoesNotRelayTwice(t *testing.T) {
	t.Parallel()
	for _, kind := range kinds {
		t.Run(kind, func(t *testing.T) {
			t.Parallel()
			b := setup(t, &setupOpts{kind: kind})
			cfg := b.config()
			cfg.BatchSize = 10
			cfg.SweepInterval, cfg.SweepMinAge = time.Millisecond, time.Nanosecond
			// A sweep every millisecond keeps SQLite's one writer busy; on
			// a loaded machine the 600 ms lease of config() then expired
			// before a renewal got the writer, and the next term relayed
			// the last batch again (at-least-once, as designed, but not what
			// this test is about): a lease that outlives the test.
			cfg.LeaseTTL = time.Minute
			b.start(cfg)
			ids := b.write(400, 50)
			b.waitRelayed(ids, 30*time.Second)
			require.ElementsMatch(t, ids, b.streamIDs(), "each entry relayed once")
		})
	}
}

// TestSweepDeletesSyncedOriginalsPastTheEventRetention: with
// EventRetention, the leader's sweep deletes the synced originals created
// before it, and only those: a pending original as old stays, and so do
// the younger ones.
func TestSweepDeletesSyncedOriginalsPastTheEventRetention(t *testing.T) {
	t.Parallel()
	for _, kind := range kinds {
		t.Run(kind, func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			b := setup(t, &setupOpts{kind: kind})
			old := outbox.NewWriter(b.st, &outbox.WriterConfig{Stream: b.stream, Now: func() time.Time { return time.Now().Add(-2 * time.Hour) }})
			var oldIDs []string
			for i := range 3 {
				res, err := old.Write(ctx, []outbox.Input{{SourceKey: "s", DeviceKey: fmt.Sprintf("old%d", i), OccurredAt: "2026-11-01T10:00:00Z"}})
				require.NoError(t, err)
				oldIDs = append(oldIDs, res[0].ID)
			}
			young := b.write(2, 2)
			all := append(slices.Clone(oldIDs), young...)
			reg := prometheus.NewRegistry()
			cfg := b.config()
			cfg.Registerer, cfg.EventRetention = reg, time.Hour
			cfg.SweepInterval, cfg.SweepMinAge = 50*time.Millisecond, time.Millisecond
			b.start(cfg)
			b.waitRelayed(all, 10*time.Second)
			// The worker's part: all synced but one old original.
			_, err := b.st.MarkSynced(ctx, append([]string{oldIDs[0], oldIDs[1]}, young...), time.Now())
			require.NoError(t, err)

			require.Eventually(t, func() bool { return counterValue(t, reg, "outboxd_dispatcher_events_deleted_total") == 2 },
				10*time.Second, 5*time.Millisecond)
			got, err := b.st.LoadEvents(ctx, all)
			require.NoError(t, err)
			require.NotContains(t, got, oldIDs[0])
			require.NotContains(t, got, oldIDs[1])
			for _, id := range append([]string{oldIDs[2]}, young...) {
				require.Contains(t, got, id, "pending, or younger than the retention")
			}
		})
	}
}

// TestRelaysEachEntryOnceWhileTheFeedIsBehind is the count of `make run` +
// `make load` (more stream entries than accepted events) in
// small, on the SQLite store and the real Redis: the dispatcher follows
// the feed from an empty outbox, a backlog arrives faster than it relays
// (the feed behind for many batches), then small writes keep coming while
// it catches up, and the sweep runs as often as it can with an age that
// lets it reach entries the feed has not delivered yet, or whose store
// write is still under way. Redis's count of entries ever added to the
// stream (XINFO STREAM entries-added, trimming off) must equal the
// accepted events.
func TestRelaysEachEntryOnceWhileTheFeedIsBehind(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	cfg := b.config()
	cfg.BatchSize = 50
	cfg.SweepInterval, cfg.SweepMinAge = time.Millisecond, time.Nanosecond
	cfg.LeaseTTL = time.Minute // one term: a takeover's duplicates are allowed, and not this test's subject
	cfg.TrimOff = true
	d := b.start(cfg)
	require.Eventually(t, func() bool { return d.Stats().Leader }, 10*time.Second, 5*time.Millisecond)
	ids := b.write(2000, 500) // the backlog: 40 batches behind
	for range 100 {           // and a trickle while the feed catches up
		ids = append(ids, b.write(7, 7)...)
	}
	b.waitDispatched(60 * time.Second)
	info, err := b.rdb.XInfoStream(context.Background(), b.stream).Result()
	require.NoError(t, err)
	require.Equal(t, int64(len(ids)), info.EntriesAdded, "stream entries added for %d accepted events", len(ids))
	require.ElementsMatch(t, ids, b.streamIDs(), "each entry relayed once")
	require.Equal(t, int64(len(ids)), d.Stats().Relayed)
}

// failingHousekeeping is a store whose deletions past the retentions fail
// (a deleteMany that hits its deadline), and that counts them and the
// feeds opened.
type failingHousekeeping struct {
	store.Store
	deletes, opens atomic.Int64
}

func (f *failingHousekeeping) DeleteDispatched(context.Context, time.Time) (int64, error) {
	f.deletes.Add(1)
	return 0, fmt.Errorf("error deleting dispatched outbox entries: %w: MaxTimeMSExpired (50)", store.ErrUnavailable)
}

func (f *failingHousekeeping) DeleteSynced(context.Context, time.Time, store.SyncedScope, int) (int64, error) {
	return 0, fmt.Errorf("error deleting synced originals: %w: MaxTimeMSExpired (50)", store.ErrUnavailable)
}

func (f *failingHousekeeping) OpenFeed(ctx context.Context, stream string, from store.Position, opts store.FeedOptions) (store.Feed, error) {
	f.opens.Add(1)
	return f.Store.OpenFeed(ctx, stream, from, opts)
}

// TestHousekeepingFailureKeepsRelaying: retention rounds whose deletions
// past the retentions fail do not end the relay loop: the feed stays open
// (no reopen, no back-off: at least 12 failed rounds, at most a few opens)
// and what is written after is relayed.
func TestHousekeepingFailureKeepsRelaying(t *testing.T) {
	t.Parallel()
	for _, kind := range kinds {
		t.Run(kind, func(t *testing.T) {
			t.Parallel()
			b := setup(t, &setupOpts{kind: kind})
			f := &failingHousekeeping{Store: b.st}
			cfg := b.config()
			cfg.SweepInterval, cfg.EventRetention = 20*time.Millisecond, time.Hour
			d := b.startOn(f, cfg)
			var ids []string
			for range 3 {
				ids = append(ids, b.write(2, 2)...)
				seen := f.deletes.Load()
				require.Eventually(t, func() bool { return f.deletes.Load() >= seen+4 }, 10*time.Second, 5*time.Millisecond, "sweeps run")
			}
			b.waitRelayed(ids, 10*time.Second)
			// When a failed sweep ended the relay, every sweep reopened the
			// feed; a stray reopen (a lease renewal late under load) is not
			// the sweep's.
			require.Less(t, 3*f.opens.Load(), f.deletes.Load(), "the feed is not reopened after a failed sweep")
			require.True(t, d.Stats().Leader)
		})
	}
}
