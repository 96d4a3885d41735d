package operator_test

import (
	"context"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/outboxd/outboxd/internal/failpolicy"
	"github.com/outboxd/outboxd/internal/operator"
	"github.com/outboxd/outboxd/internal/stream"
)

// TestResumeRetries: ResumeRetries clears a halted class of the group's
// workers and of the stream's dispatchers in Redis and says which it
// cleared; another class clears nothing.
func TestResumeRetries(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t)
	pgDown := failpolicy.Infrastructure(failpolicy.SourcePostgres)
	storeDown := failpolicy.Infrastructure(failpolicy.SourceStore)
	_, err := b.rc.Streak(b.keys, stream.ComponentWorker).Fail(ctx, pgDown, 1)
	require.NoError(t, err)
	_, err = b.rc.Streak(b.keys, stream.ComponentDispatcher).Fail(ctx, storeDown, 1)
	require.NoError(t, err)
	halted := func() []string {
		var out []string
		for _, c := range []string{stream.ComponentWorker, stream.ComponentDispatcher} {
			st, err := b.rc.Streak(b.keys, c).Load(ctx)
			require.NoError(t, err)
			for class := range st.Halts {
				out = append(out, c+" "+class)
			}
		}
		return out
	}
	require.ElementsMatch(t, []string{"worker " + failpolicy.ClassInfrastructure, "dispatcher " + failpolicy.ClassInfrastructure}, halted())

	res, err := b.op.ResumeRetries(ctx, operator.RetriesQuery{Class: failpolicy.ClassRecord})
	require.NoError(t, err)
	require.Equal(t, &operator.RetriesResult{Class: failpolicy.ClassRecord, Resumed: []operator.ResumedHalt{}}, res, "another class: nothing cleared")
	require.Len(t, halted(), 2)
	res, err = b.op.ResumeRetries(ctx, operator.RetriesQuery{Class: failpolicy.ClassInfrastructure})
	require.NoError(t, err)
	require.Equal(t, []operator.ResumedHalt{
		{Component: stream.ComponentWorker, Code: pgDown.Code, Source: failpolicy.SourcePostgres},
		{Component: stream.ComponentDispatcher, Code: storeDown.Code, Source: failpolicy.SourceStore},
	}, res.Resumed)
	require.Empty(t, halted())
}
