package dispatcher_test

import (
	"context"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.mongodb.org/mongo-driver/bson/primitive"
	"go.mongodb.org/mongo-driver/mongo"

	"github.com/outboxd/outboxd/dispatcher"
	"github.com/outboxd/outboxd/internal/mongoseam"
	"github.com/outboxd/outboxd/outbox"
	"github.com/outboxd/outboxd/store"
	"github.com/outboxd/outboxd/store/mongostore"
)

// loadRecorder is a store whose LoadEvents records, per call, the ids and
// the read-after positions its context carries (store.WithReadAfter).
type loadRecorder struct {
	store.Store
	mu    sync.Mutex
	after map[string][]string // by event id: the positions of the reads that named it
}

func (r *loadRecorder) LoadEvents(ctx context.Context, ids []string) (map[string]store.Loaded, error) {
	r.mu.Lock()
	for _, id := range ids {
		r.after[id] = append(r.after[id], store.ReadAfterOf(ctx)...)
	}
	r.mu.Unlock()
	return r.Store.LoadEvents(ctx, ids)
}

// positions returns the positions recorded for the reads of id.
func (r *loadRecorder) positions(id string) []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.after[id])
}

// TestMongoReadAfterFlowsToTheWorker: on MongoDB (lungo) the cluster time
// of the commit that inserted an outbox entry, as the change stream
// delivers it, travels in the message the dispatcher relays
// (outbox.Message.ReadAfter) to the worker, which hands it to the store
// with its read of the original (store.WithReadAfter): the same position,
// for every event written while the dispatcher followed the feed.
func TestMongoReadAfterFlowsToTheWorker(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t, &setupOpts{kind: kindMongo})
	// A change stream of the test's own learns each entry's commit time.
	probe, err := mongoseam.Database(b.mongo).Collection(mongostore.OutboxCollection).Watch(ctx, mongo.Pipeline{})
	require.NoError(t, err)
	t.Cleanup(func() { _ = probe.Close(ctx) })
	cfg := b.config()
	// One leadership throughout: a lease lost on a loaded machine (the
	// test's 600 ms) would make the next leader catch up from the outbox,
	// whose entries carry no commit time.
	cfg.LeaseTTL = 30 * time.Second
	d := b.start(cfg)
	// The first start catches up from the outbox, then checkpoints and
	// follows the feed: what is written after that comes through the feed.
	require.Eventually(t, func() bool {
		st, err := b.st.ReadLease(ctx, dispatcher.LeaseName(b.stream))
		return err == nil && st != nil && st.CheckpointAt != nil
	}, 10*time.Second, 10*time.Millisecond, "the dispatcher follows the feed")
	rec := &loadRecorder{Store: b.st, after: map[string][]string{}}
	p := b.startWorkerOn(rec)
	ids := b.write(6, 2) // three commits of two
	b.requireConverged(p)
	require.Zero(t, d.Stats().CaughtUp, "every entry came through the feed")

	commits := map[string]string{} // event id -> the position of its entry's commit
	for len(commits) < len(ids) {
		tctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		require.True(t, probe.Next(tctx), "the probe sees every insert: %v", probe.Err())
		cancel()
		var ev struct {
			OperationType string              `bson:"operationType"`
			ClusterTime   primitive.Timestamp `bson:"clusterTime"`
			FullDocument  struct {
				EventID primitive.ObjectID `bson:"eventId"`
			} `bson:"fullDocument"`
		}
		require.NoError(t, probe.Decode(&ev))
		if ev.OperationType == "insert" {
			require.False(t, ev.ClusterTime.IsZero())
			commits[ev.FullDocument.EventID.Hex()] = mongostore.ClusterTimePosition(ev.ClusterTime)
		}
	}

	msgs, err := b.rdb.XRange(ctx, b.stream, "-", "+").Result()
	require.NoError(t, err)
	require.Len(t, msgs, len(ids))
	for _, m := range msgs {
		msg, err := outbox.DecodeMessage(m.Values)
		require.NoError(t, err)
		require.NotEmpty(t, msg.ReadAfter, "message of %s", msg.EventID)
		require.Equal(t, commits[msg.EventID], msg.ReadAfter, "the message carries its entry's commit time: %s", msg.EventID)
	}
	for _, id := range ids {
		require.Contains(t, rec.positions(id), commits[id], "the worker's read of %s is after its commit", id)
	}
}
