package sqlitestore

import (
	"context"
	"path/filepath"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/outboxd/outboxd/store"
)

// TestReadStmt: the feed's reads go through statements prepared once per
// Store, whatever the number of reads and readers, and Close closes them.
func TestReadStmt(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s, err := Open(ctx, filepath.Join(t.TempDir(), "outboxd.db"), nil)
	require.NoError(t, err)
	defer s.Close(ctx)
	require.NoError(t, s.Migrate(ctx, nil))

	f, err := s.OpenFeed(ctx, "s", nil, store.FeedOptions{})
	require.NoError(t, err)
	var wg sync.WaitGroup
	for range 2 * ReadConnsDefault { // more readers than read connections
		wg.Go(func() {
			for range 20 {
				_, err := f.(*feed).read(ctx, 10)
				require.NoError(t, err)
			}
		})
	}
	wg.Wait()
	prepared := func() (qs []string) {
		s.readStmts.Range(func(q, _ any) bool {
			qs = append(qs, q.(string))
			return true
		})
		return qs
	}
	require.ElementsMatch(t, []string{qFloor, s.q.feed}, prepared(), "160 reads, two statements")
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
