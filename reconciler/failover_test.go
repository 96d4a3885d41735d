package reconciler_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/outboxd/outboxd/internal/testkit"
	"github.com/outboxd/outboxd/reconciler"
	"github.com/outboxd/outboxd/store"
)

// failingOver answers claims as a replica set in an election does
// (NotWritablePrimary, classified by the store as unavailable).
type failingOver struct {
	store.Store
	claims int
}

func (f *failingOver) Claim(context.Context, []string, time.Time, time.Time) (store.Claimed, error) {
	f.claims++
	return store.Claimed{}, fmt.Errorf("error claiming: %w: NotWritablePrimary (10107)", store.ErrUnavailable)
}

// TestSweepStopsWhenTheStoreFailsOver: an unavailable store ends the sweep
// with an error at its claim instead of counting failed claims; the next
// sweep claims them all.
func TestSweepStopsWhenTheStoreFailsOver(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t)
	b.writeAged(t, 5)
	fo := &failingOver{Store: b.st}
	r, err := reconciler.New(fo, b.rdb, b.config(), testkit.Logger(t))
	require.NoError(t, err)
	rep, err := r.Sweep(ctx)
	require.ErrorIs(t, err, store.ErrUnavailable)
	require.Equal(t, 1, fo.claims, "one claim for the sweep")
	require.Zero(t, rep.ClaimFailed)
	require.Empty(t, b.published(t))

	rep, err = b.reconciler(t, nil).Sweep(ctx)
	require.NoError(t, err)
	require.Equal(t, 5, rep.Published)
}
