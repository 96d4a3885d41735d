package sqlitestore

import (
	"context"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/outboxd/outboxd/outbox"
	"github.com/outboxd/outboxd/store"
)

// TestReadStmt: the feed's reads go through statements prepared once per
// Store, whatever the number of reads and readers, and Close closes them. A
// read with nothing committed after its position ends at the last seq (the
// poll of an idle store): it prepares nothing else.
func TestReadStmt(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s, err := Open(ctx, filepath.Join(t.TempDir(), "outboxd.db"), nil)
	require.NoError(t, err)
	defer s.Close(ctx)
	require.NoError(t, s.Migrate(ctx, nil))
	w := outbox.NewWriter(s, nil)

	f, err := s.OpenFeed(ctx, w.Stream(), nil, store.FeedOptions{})
	require.NoError(t, err)
	prepared := func() (qs []string) {
		s.readStmts.Range(func(q, _ any) bool {
			qs = append(qs, q.(string))
			return true
		})
		return qs
	}
	got, err := f.(*feed).read(ctx, 10)
	require.NoError(t, err)
	require.Empty(t, got)
	require.ElementsMatch(t, []string{s.q.lastSeq}, prepared(), "an idle poll: one statement")

	_, err = w.Write(ctx, []outbox.Input{{IdempotencyKey: "k", SourceKey: "s", DeviceKey: "d", OccurredAt: "2026-12-06T05:00:00Z"}})
	require.NoError(t, err)
	var wg sync.WaitGroup
	var read atomic.Int64
	for range 2 * ReadConnsDefault { // more readers than read connections
		wg.Go(func() {
			for range 20 {
				// Each reader its own feed from the start: every read
				// finds the entry.
				g, err := s.OpenFeed(ctx, w.Stream(), store.Position("0"), store.FeedOptions{})
				require.NoError(t, err)
				got, err := g.(*feed).read(ctx, 10)
				require.NoError(t, err)
				read.Add(int64(len(got)))
			}
		})
	}
	wg.Wait()
	require.Equal(t, int64(2*ReadConnsDefault*20), read.Load())
	require.ElementsMatch(t, []string{s.q.lastSeq, qFloor, s.q.feed}, prepared(), "160 reads, three statements")
	first, err := s.readStmt(ctx, s.q.feed)
	require.NoError(t, err)
	again, err := s.readStmt(ctx, s.q.feed)
	require.NoError(t, err)
	require.Same(t, first, again)

	require.NoError(t, s.Close(ctx))
	require.Empty(t, prepared(), "closed with the Store")
	_, err = s.readStmt(ctx, s.q.feed)
	require.Error(t, err)
}
