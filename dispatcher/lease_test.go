package dispatcher

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.mongodb.org/mongo-driver/bson"

	"github.com/outboxd/outboxd/internal/clock"
	"github.com/outboxd/outboxd/internal/testkit"
)

func TestLease(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	m := testkit.NewMongo(t, nil)
	rdb, prefix := testkit.NewRedis(t)
	clk := clock.NewFake(time.Now())
	newDispatcher := func(owner string) *Dispatcher {
		d, err := New(m.DB, rdb, &Config{Stream: prefix, Owner: owner, Clock: clk, LeaseTTL: time.Minute}, testkit.Logger(t))
		require.NoError(t, err)
		return d
	}
	a, b := newDispatcher("a"), newDispatcher("b")
	token, err := bson.Marshal(bson.M{"_data": "t1"})
	require.NoError(t, err)

	termA, err := a.acquire(ctx)
	require.NoError(t, err)
	require.Equal(t, int64(1), termA)
	termB, err := b.acquire(ctx)
	require.NoError(t, err)
	require.Zero(t, termB, "the lease is held")
	require.NoError(t, a.renew(ctx, termA))
	require.NoError(t, a.checkpoint(ctx, termA, token, false))

	clk.Advance(2 * time.Minute) // a paused, its lease ran out
	termB, err = b.acquire(ctx)
	require.NoError(t, err)
	require.Equal(t, int64(2), termB)

	other, err := bson.Marshal(bson.M{"_data": "t0"})
	require.NoError(t, err)
	require.ErrorIs(t, a.checkpoint(ctx, termA, other, false), ErrFenced, "the stale leader's checkpoint is rejected")
	require.ErrorIs(t, a.renew(ctx, termA), ErrFenced)
	a.release(ctx, termA) // no effect

	st, err := ReadState(ctx, m.DB, prefix)
	require.NoError(t, err)
	require.Equal(t, "b", st.Owner)
	require.Equal(t, int64(2), st.Term)
	require.Equal(t, bson.Raw(token), st.ResumeToken, "the checkpoint did not move backwards")

	require.NoError(t, b.checkpoint(ctx, termB, nil, true))
	st, err = ReadState(ctx, m.DB, prefix)
	require.NoError(t, err)
	require.Nil(t, st.ResumeToken, "a lost token is forgotten")

	b.release(ctx, termB)
	termA, err = a.acquire(ctx) // released: no need to wait for expiry
	require.NoError(t, err)
	require.Equal(t, int64(3), termA)
}

func TestConfig(t *testing.T) {
	t.Parallel()
	t.Run("Defaults", func(t *testing.T) {
		c := (*Config)(nil).withDefaults()
		require.NoError(t, c.validate())
		require.Equal(t, "event-stream", c.Stream)
		require.Equal(t, BatchSizeDefault, c.BatchSize)
		require.Equal(t, LeaseTTLDefault, c.LeaseTTL)
		require.Equal(t, IdleCheckpointDefault, c.IdleCheckpoint)
		require.Equal(t, PollIntervalDefault, c.PollInterval)
		require.Equal(t, BackoffMaxDefault, c.BackoffMax)
		require.Zero(t, c.MaxStreamLen)
		require.NotEmpty(t, c.Owner)
		require.NotEqual(t, c.Owner, (*Config)(nil).withDefaults().Owner, "two dispatchers of one process differ")
	})
	for _, tt := range []struct {
		name  string
		cfg   Config
		field string
	}{
		{"BatchSizeNegative", Config{BatchSize: -1}, "BatchSize"},
		{"BatchSizeHuge", Config{BatchSize: BatchSizeMax + 1}, "BatchSize"},
		{"LeaseTTLTooShort", Config{LeaseTTL: time.Millisecond}, "LeaseTTL"},
		{"IdleCheckpointNegative", Config{IdleCheckpoint: -time.Second}, "IdleCheckpoint"},
		{"PollIntervalNegative", Config{PollInterval: -1}, "PollInterval"},
		{"MaxStreamLenNegative", Config{MaxStreamLen: -5}, "MaxStreamLen"},
		{"BackoffMaxNegative", Config{BackoffMax: -1}, "BackoffMax"},
		{"StreamSpaces", Config{Stream: " s "}, "Stream"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			err := tt.cfg.withDefaults().validate()
			require.ErrorContains(t, err, tt.field)
		})
	}
}
