package dispatcher_test

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/outboxd/outboxd/outbox"
	"github.com/outboxd/outboxd/store"
)

// electing is a store whose feeds fail once each, as a change stream does
// when the primary steps down (ResumableChangeStreamError / 10107: the
// store classifies it as unavailable).
type electing struct {
	store.Store
	failures atomic.Int64
}

func (e *electing) OpenFeed(ctx context.Context, stream string, from store.Position, opts store.FeedOptions) (store.Feed, error) {
	f, err := e.Store.OpenFeed(ctx, stream, from, opts)
	if err != nil {
		return nil, err
	}
	return &electingFeed{Feed: f, e: e}, nil
}

type electingFeed struct {
	store.Feed
	e      *electing
	failed bool
}

func (f *electingFeed) Next(ctx context.Context, max int, wait time.Duration) ([]outbox.Entry, error) {
	if !f.failed && f.e.failures.Load() < 3 {
		f.failed = true
		f.e.failures.Add(1)
		return nil, fmt.Errorf("error reading the change stream: %w: PrimarySteppedDown (189)", store.ErrUnavailable)
	}
	return f.Feed.Next(ctx, max, wait)
}

// TestElectionIsNotALostPosition: a feed that fails because the store is
// unavailable is reopened from the saved position after a back-off; it is
// not counted as a lost position and nothing is missed.
func TestElectionIsNotALostPosition(t *testing.T) {
	t.Parallel()
	for _, kind := range kinds {
		t.Run(kind, func(t *testing.T) {
			t.Parallel()
			b := setup(t, &setupOpts{kind: kind})
			e := &electing{Store: b.st}
			d := b.startOn(e, b.config())
			var ids []string
			for range 4 {
				ids = append(ids, b.write(3, 3)...)
				b.waitRelayed(ids, 10*time.Second)
			}
			require.Equal(t, int64(3), e.failures.Load())
			require.Equal(t, ids, unique(b.streamIDs()))
			require.Zero(t, d.Stats().HistoryLost, "an election is not a lost position")
		})
	}
}
