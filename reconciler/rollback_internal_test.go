package reconciler

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.mongodb.org/mongo-driver/bson/primitive"

	"github.com/outboxd/outboxd/internal/clock"
	"github.com/outboxd/outboxd/internal/testkit"
	"github.com/outboxd/outboxd/outbox"
)

// These tests reach into the claim/rollback steps, which no public API can
// interleave deterministically.

type internalBundle struct {
	mongo  *testkit.Mongo
	clock  *clock.Fake
	stream string
	id     primitive.ObjectID
}

// setupInternal writes one original that is old enough to be a candidate.
// The clock has sub-millisecond digits, so stamps must be truncated to
// compare equal after a round trip through MongoDB.
func setupInternal(t *testing.T) *internalBundle {
	t.Helper()
	m := testkit.NewMongo(t, nil)
	clk := clock.NewFake(time.Date(2026, 11, 1, 12, 0, 0, 123456789, time.UTC))
	stream := testkit.Name("reconciler")
	res, err := outbox.NewWriter(m.DB, &outbox.WriterConfig{Clock: clk, Stream: stream}).Write(context.Background(),
		[]outbox.Input{{SourceKey: "src", DeviceKey: "d1", OccurredAt: "2026-11-01T10:00:00Z"}})
	require.NoError(t, err)
	id, err := primitive.ObjectIDFromHex(res[0].ID)
	require.NoError(t, err)
	clk.Advance(MinAgeDefault + time.Second)
	return &internalBundle{mongo: m, clock: clk, stream: stream, id: id}
}

func (b *internalBundle) event(t *testing.T) *outbox.Event {
	t.Helper()
	ev, err := outbox.FindEvent(context.Background(), b.mongo.DB, b.id.Hex())
	require.NoError(t, err)
	return ev
}

func TestRollback(t *testing.T) {
	t.Parallel()
	ctx := context.Background()

	t.Run("OnlyWithItsOwnStamp", func(t *testing.T) {
		t.Parallel()
		b := setupInternal(t)
		rdb, prefix := testkit.NewRedis(t)
		r, err := New(b.mongo.DB, rdb, &Config{Stream: prefix + ":s", Clock: b.clock}, testkit.Logger(t))
		require.NoError(t, err)

		older := r.now()
		b.clock.Advance(time.Second)
		stamp := r.now()
		prev, err := r.claim(ctx, b.id, stamp)
		require.NoError(t, err)
		require.Nil(t, prev.LastRequeuedAt)

		_, err = r.claim(ctx, b.id, stamp)
		require.ErrorIs(t, err, errNotClaimed, "a second claim within RequeueAfter")

		restored, err := r.rollback(ctx, b.id, older, nil)
		require.NoError(t, err)
		require.False(t, restored, "a stale stamp does not own the claim")
		ev := b.event(t)
		require.True(t, stamp.Equal(*ev.LastRequeuedAt))
		require.Equal(t, int64(1), ev.RequeueCount)

		restored, err = r.rollback(ctx, b.id, stamp, nil)
		require.NoError(t, err)
		require.True(t, restored)
		ev = b.event(t)
		require.Nil(t, ev.LastRequeuedAt)
		require.Zero(t, ev.RequeueCount)
	})

	t.Run("PublishFailureLeavesNewerClaimAlone", func(t *testing.T) {
		t.Parallel()
		b := setupInternal(t)
		srv := testkit.NewRedisServer(t)
		down := srv.Client()
		srv.Stop()
		up, prefix := testkit.NewRedis(t)
		stream := prefix + ":" + outbox.StreamDefault
		cfg := &Config{Stream: stream, Clock: b.clock}

		slow, err := New(b.mongo.DB, down, cfg, testkit.Logger(t))
		require.NoError(t, err)
		other, err := New(b.mongo.DB, up, cfg, testkit.Logger(t))
		require.NoError(t, err)

		// slow claims, its XADD fails, and before it rolls back, so much
		// time passes that another run claims and publishes the event.
		var otherRep Report
		var otherErr error
		slow.testHookBeforeRollback = func(id primitive.ObjectID) {
			require.Equal(t, b.id, id)
			b.clock.Advance(RequeueAfterDefault + time.Millisecond)
			otherRep, otherErr = other.Sweep(ctx)
		}
		claimedAt := slow.now()
		rep, err := slow.Sweep(ctx)
		require.NoError(t, err)
		require.Equal(t, 1, rep.PublishFailed)
		require.Equal(t, 1, rep.RollbackSkipped)
		require.Zero(t, rep.RolledBack)
		require.True(t, rep.Failed())

		require.NoError(t, otherErr)
		require.Equal(t, 1, otherRep.Published)
		ev := b.event(t)
		require.True(t, claimedAt.Add(RequeueAfterDefault+time.Millisecond).Equal(*ev.LastRequeuedAt), "the newer claim stays")
		require.Equal(t, int64(2), ev.RequeueCount)
		n, err := up.XLen(ctx, stream).Result()
		require.NoError(t, err)
		require.Equal(t, int64(1), n)
	})
}
