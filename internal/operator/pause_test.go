package operator_test

import (
	"context"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/outboxd/outboxd/internal/operator"
	"github.com/outboxd/outboxd/store"
)

// TestPauseAndResume: a pause is recorded in the store with who paused and
// since when, listed by Pauses until a resume ends it; pausing a paused
// stage or resuming a running one changes nothing, and a stage that is no
// stage of the stream is invalid.
func TestPauseAndResume(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t)
	since := b.now.Add(time.Minute) // the operator's clock

	pauses, err := b.op.Pauses(ctx)
	require.NoError(t, err)
	require.Empty(t, pauses.Paused)
	require.Equal(t, []string{"relay", "relay:0", "projection:g", "replay:g"}, pauses.Stages)

	res, err := b.op.Pause(ctx, operator.PauseQuery{Stage: store.StageProjection, By: "alice"})
	require.NoError(t, err)
	require.Equal(t, "projection:g", res.Stage, "the stage of the operator's group")
	require.True(t, res.Paused)
	require.True(t, res.Changed)
	require.Equal(t, "alice", res.By)
	require.True(t, since.Equal(*res.Since))
	p, err := store.Paused(ctx, b.st, b.keys.Name(), store.Stage{Kind: store.StageProjection, Group: "g"}, since)
	require.NoError(t, err)
	require.NotNil(t, p, "recorded in the store, where every replica reads it")

	b.now = b.now.Add(time.Hour)
	res, err = b.op.Pause(ctx, operator.PauseQuery{Stage: "projection:g"})
	require.NoError(t, err)
	require.False(t, res.Changed, "already paused")
	require.Equal(t, "alice", res.By)
	require.True(t, since.Equal(*res.Since), "paused since the first pause")
	res, err = b.op.Pause(ctx, operator.PauseQuery{Stage: "relay"})
	require.NoError(t, err)
	require.Equal(t, "operator", res.By, "by defaults to operator")

	pauses, err = b.op.Pauses(ctx)
	require.NoError(t, err)
	stages := []string{}
	for _, p := range pauses.Paused {
		stages = append(stages, p.Stage)
	}
	require.ElementsMatch(t, []string{"relay", "projection:g"}, stages)

	res, err = b.op.Resume(ctx, operator.PauseQuery{Stage: "projection"})
	require.NoError(t, err)
	require.Equal(t, &operator.PauseResult{Stage: "projection:g", Changed: true}, res)
	res, err = b.op.Resume(ctx, operator.PauseQuery{Stage: "projection:g"})
	require.NoError(t, err)
	require.False(t, res.Changed, "running already")
	pauses, err = b.op.Pauses(ctx)
	require.NoError(t, err)
	require.Len(t, pauses.Paused, 1)
	require.Equal(t, "relay", pauses.Paused[0].Stage)

	for _, stage := range []string{"", "relay:1", "lane", "projection:"} {
		_, err = b.op.Pause(ctx, operator.PauseQuery{Stage: stage})
		require.ErrorIs(t, err, operator.ErrInvalid, stage)
		_, err = b.op.Resume(ctx, operator.PauseQuery{Stage: stage})
		require.ErrorIs(t, err, operator.ErrInvalid, stage)
	}
}

// TestCancelReplay: a cancel removes from the replay lane the entries the
// group has not been delivered yet (the one a worker holds stays, and the
// live stream is untouched), and refuses every further chunk of a replay
// that began before it; a replay begun after it runs.
func TestCancelReplay(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t)
	b.write(t, "d1", "d2", "d3")
	lane := b.keys.ReplayLane()
	require.NoError(t, b.rdb.XGroupCreateMkStream(ctx, lane.Stream(), lane.Group(), "0").Err())
	day := time.Date(2026, 11, 1, 0, 0, 0, 0, time.UTC)
	q := operator.ReplayQuery{EventsQuery: operator.EventsQuery{From: day, To: day.Add(24 * time.Hour), Limit: 1}}
	first, err := b.op.Replay(ctx, q)
	require.NoError(t, err)
	require.False(t, first.Done)
	q.After, q.Started = first.Next, *first.Started
	_, err = b.op.Replay(ctx, q)
	require.NoError(t, err)
	_, err = b.rdb.XReadGroup(ctx, &redis.XReadGroupArgs{Group: lane.Group(), Consumer: "c", Streams: []string{lane.Stream(), ">"}, Count: 1}).Result()
	require.NoError(t, err)
	require.NoError(t, b.rc.Publisher(b.keys, nil, nil).Publish(ctx, []string{"{}"}))

	b.now = b.now.Add(time.Second)
	res, err := b.op.CancelReplay(ctx)
	require.NoError(t, err)
	require.Equal(t, int64(1), res.Removed, "the undelivered entry")
	require.True(t, b.now.Add(time.Minute).Equal(res.CancelledAt))
	require.Equal(t, int64(1), b.rdb.XLen(ctx, lane.Stream()).Val(), "the entry a worker holds stays")
	require.Equal(t, int64(1), b.rdb.XLen(ctx, b.keys.Stream()).Val(), "the live stream is untouched")

	q.After = ""
	_, err = b.op.Replay(ctx, q)
	require.ErrorIs(t, err, operator.ErrCancelled, "a chunk of the replay begun before the cancel")
	require.Equal(t, int64(1), b.rdb.XLen(ctx, lane.Stream()).Val(), "publishes nothing")

	b.now = b.now.Add(time.Second)
	q.Started, q.Limit = time.Time{}, 0
	again, err := b.op.Replay(ctx, q)
	require.NoError(t, err, "a replay begun after the cancel")
	require.Equal(t, 3, again.Published)
}
