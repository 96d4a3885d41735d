package dispatcher_test

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.mongodb.org/mongo-driver/bson"

	"github.com/outboxd/outboxd/internal/mongoseam"
	"github.com/outboxd/outboxd/internal/testkit"
	"github.com/outboxd/outboxd/outbox"
	"github.com/outboxd/outboxd/store/mongostore"
	"github.com/outboxd/outboxd/store/sqlitestore"
)

// TestIngestTransientTransactionRetried is the row "MongoDB transaction
// aborted or transient error: retried; original and outbox entry both exist
// or neither", on both stores, ending with the checker. It lives with the
// dispatcher's tests because their bundle runs the writer, the relay and a
// worker on either store. (A TransientTransactionError between the original
// and its entry is shown through the driver, whose retry it needs, in
// mongostore's TestTransientErrorsRunTheTransactionAgain.)
//
//   - Two writers of one key in concurrent transactions: one original, and
//     every answer carries its id (lungo runs write transactions one at a
//     time, SQLite takes its write lock at BEGIN IMMEDIATE; on a replica set
//     the loser meets a write conflict, or the unique index, and its
//     transaction runs again: mongostore's
//     TestKeyRaceOnAReplicaSetIsAWriteConflict).
//   - SQLite: another process holds the write lock for a while; the writes
//     wait for it (busy_timeout) and then commit.
func TestIngestTransientTransactionRetried(t *testing.T) {
	t.Parallel()
	for _, kind := range kinds {
		t.Run(kind, func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			b := setup(t, &setupOpts{kind: kind})
			b.start(b.config())
			p := b.startWorker()
			w := outbox.NewWriter(b.st, &outbox.WriterConfig{Stream: b.stream})
			write := func(in outbox.Input) (outbox.Result, error) {
				res, err := w.Write(ctx, []outbox.Input{in})
				if err != nil {
					return outbox.Result{}, err
				}
				b.keys.Store(res[0].IdempotencyKey, true)
				return res[0], nil
			}
			b.write(3, 3)
			b.requireConverged(p)
			before := counts(t, b)

			// Concurrent writers of one key.
			const writers = 8
			results := make([]outbox.Result, writers)
			var wg sync.WaitGroup
			for i := range writers {
				wg.Go(func() {
					res, err := write(outbox.Input{SourceKey: b.source, DeviceKey: "contended", OccurredAt: "2026-11-01T11:00:00Z"})
					assert.NoError(t, err)
					results[i] = res
				})
			}
			wg.Wait()
			require.False(t, t.Failed())
			created := 0
			for _, r := range results {
				require.Equal(t, results[0].ID, r.ID, "every answer carries the one original's id")
				if !r.Duplicate {
					created++
				}
			}
			require.Equal(t, 1, created)
			require.Equal(t, before+1, counts(t, b))

			if kind == kindSQLite {
				holdSQLiteLock(t, b)
			}
			b.requireConverged(p)
		})
	}
}

// holdSQLiteLock lets another handle on the file (another process, as far
// as SQLite's locks go) hold the write lock while writers run: they wait for
// it and commit after it is released.
func holdSQLiteLock(t *testing.T, b *testBundle) {
	t.Helper()
	ctx := context.Background()
	other, err := sqlitestore.Open(ctx, b.st.(*sqlitestore.Store).Path(), nil)
	require.NoError(t, err)
	defer other.Close(ctx)
	lock, err := other.DB().BeginTx(ctx, nil) // BEGIN IMMEDIATE: the write lock
	require.NoError(t, err)
	_, err = lock.ExecContext(ctx, `CREATE TABLE hold_the_lock (x INTEGER)`)
	require.NoError(t, err)
	var done atomic.Int32
	var wg sync.WaitGroup
	for range 4 {
		wg.Go(func() {
			b.write(2, 2)
			done.Add(1)
		})
	}
	testkit.Never(t, func() bool { return done.Load() > 0 }, 300*time.Millisecond, 10*time.Millisecond,
		"a write committed while another process held the lock")
	require.NoError(t, lock.Rollback())
	wg.Wait()
}

// counts returns how many originals the store holds, after checking that
// it holds as many outbox entries (none expires within a test).
func counts(t *testing.T, b *testBundle) int64 {
	t.Helper()
	c, err := b.st.Counts(context.Background())
	require.NoError(t, err)
	total := c.Total
	var entries int64
	require.NoError(t, countEntries(b, &entries))
	require.Equal(t, total, entries, "an original without its outbox entry, or the reverse")
	return total
}

// countEntries counts the outbox entries (dispatched or not) of the bundle's
// store.
func countEntries(b *testBundle, n *int64) error {
	ctx := context.Background()
	if b.mongo != nil {
		c, err := mongoseam.Database(b.mongo).Collection(mongostore.OutboxCollection).CountDocuments(ctx, bson.M{})
		*n = c
		return err
	}
	return b.st.(*sqlitestore.Store).DB().QueryRowContext(ctx, `SELECT count(*) FROM outbox`).Scan(n)
}
