package stream_test

import (
	"context"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/outboxd/outboxd/internal/failpolicy"
	"github.com/outboxd/outboxd/internal/stream"
)

var _ failpolicy.SharedStreak = (*stream.Streak)(nil)

// TestStreak: the error-streak rule's state in Redis, one run for every
// process of a component, as failpolicy.Streak uses it.
func TestStreak(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pgDown := failpolicy.Infrastructure(failpolicy.SourcePostgres)
	storeDown := failpolicy.Infrastructure(failpolicy.SourceStore)
	poison := failpolicy.Failure{Code: "projection_failed", Class: failpolicy.ClassRecord, Source: failpolicy.SourcePostgres}

	t.Run("OneRunForEveryProcess", func(t *testing.T) {
		t.Parallel()
		b := setup(t, nil)
		one, two := b.c.Streak(b.keys, stream.ComponentWorker), b.c.Streak(b.keys, stream.ComponentWorker)
		st, err := one.Fail(ctx, pgDown, 3)
		require.NoError(t, err)
		require.Equal(t, failpolicy.SharedState{Run: pgDown, N: 1, Halts: map[string]failpolicy.Failure{}}, st)
		st, err = two.Fail(ctx, pgDown, 3)
		require.NoError(t, err)
		require.Equal(t, 2, st.N, "one run for both")
		require.Empty(t, st.Halts)
		st, err = one.Fail(ctx, pgDown, 3)
		require.NoError(t, err)
		require.Equal(t, map[string]failpolicy.Failure{failpolicy.ClassInfrastructure: pgDown}, st.Halts, "halted at the limit")
		st, err = two.Fail(ctx, storeDown, 3)
		require.NoError(t, err)
		require.Equal(t, storeDown, st.Run, "another code: a new run")
		require.Equal(t, 1, st.N)
		require.Contains(t, st.Halts, failpolicy.ClassInfrastructure, "the halt stays until it clears")
		loaded, err := two.Load(ctx)
		require.NoError(t, err)
		require.Equal(t, st, loaded)
		other, err := b.c.Streak(b.keys, stream.ComponentDispatcher).Load(ctx)
		require.NoError(t, err)
		require.Zero(t, other.N, "the dispatcher's rule is its own")
	})

	t.Run("SuccessesEndRunsAndClearHalts", func(t *testing.T) {
		t.Parallel()
		b := setup(t, nil)
		s := b.c.Streak(b.keys, stream.ComponentWorker)
		_, err := s.Fail(ctx, pgDown, 1)
		require.NoError(t, err)
		st, err := s.Succeed(ctx, failpolicy.SourceStore)
		require.NoError(t, err)
		require.Equal(t, 1, st.N, "another source's success changes nothing")
		require.Len(t, st.Halts, 1)
		st, err = s.Succeed(ctx, failpolicy.SourcePostgres)
		require.NoError(t, err)
		require.Zero(t, st.N)
		require.Empty(t, st.Halts)

		_, err = s.Fail(ctx, poison, 1)
		require.NoError(t, err)
		st, err = s.Succeed(ctx, failpolicy.SourcePostgres)
		require.NoError(t, err)
		require.Equal(t, 1, st.N, "PostgreSQL answering is no record going through")
		require.Contains(t, st.Halts, failpolicy.ClassRecord)
		st, err = s.Succeed(ctx, "")
		require.NoError(t, err)
		require.Zero(t, st.N)
		require.Empty(t, st.Halts)
	})

	t.Run("ResumeClearsOneClassOrAll", func(t *testing.T) {
		t.Parallel()
		b := setup(t, nil)
		s := b.c.Streak(b.keys, stream.ComponentWorker)
		_, err := s.Fail(ctx, pgDown, 1)
		require.NoError(t, err)
		_, err = s.Fail(ctx, poison, 1)
		require.NoError(t, err)
		cleared, st, err := s.Resume(ctx, failpolicy.ClassInfrastructure)
		require.NoError(t, err)
		require.Equal(t, []failpolicy.Failure{pgDown}, cleared)
		require.Equal(t, map[string]failpolicy.Failure{failpolicy.ClassRecord: poison}, st.Halts)
		require.Equal(t, 1, st.N, "the run of another class goes on")
		require.Equal(t, int64(1), st.Resumes)
		cleared, st, err = s.Resume(ctx, "")
		require.NoError(t, err)
		require.Equal(t, []failpolicy.Failure{poison}, cleared)
		require.Empty(t, st.Halts)
		require.Zero(t, st.N)
		require.Equal(t, int64(2), st.Resumes)
		cleared, _, err = s.Resume(ctx, failpolicy.ClassRecord)
		require.NoError(t, err)
		require.Empty(t, cleared, "nothing halted: nothing cleared")
	})
}
