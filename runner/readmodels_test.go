package runner

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/outboxd/outboxd/internal/testkit"
	"github.com/outboxd/outboxd/outbox"
	"github.com/outboxd/outboxd/store/sqlitestore"
)

// TestTwoReadModelsOnOneStream: the stock roles as two deployments of
// `work` on one stream, each its own --group and projection file, one of
// them --owns-synced=false, beside a `dispatch`: each read model counts
// every original exactly once, each group acknowledges everything, and the
// originals are synced by the group that owns syncedAt only.
func TestTwoReadModelsOnOneStream(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	rdb, prefix := testkit.NewRedis(t)
	s := prefix + "-s"
	dir := t.TempDir()
	st, path := migratedSQLite(t, dir)

	pg := testkit.NewPostgres(t)
	files := map[string]string{}
	for _, rm := range []string{"rm_a", "rm_b"} {
		_, err := pg.Pool.Exec(ctx, fmt.Sprintf(`CREATE TABLE %[1]s (event_id text PRIMARY KEY);
			CREATE TABLE %[1]s_count (n int NOT NULL); INSERT INTO %[1]s_count VALUES (0)`, rm))
		require.NoError(t, err)
		files[rm] = filepath.Join(dir, rm+".sql")
		// The counter grows only by the rows this statement inserted:
		// a redelivery counts nothing.
		require.NoError(t, os.WriteFile(files[rm], []byte(fmt.Sprintf(`-- key: %[1]s.event_id
WITH ins AS (INSERT INTO %[1]s VALUES (:eventId) ON CONFLICT DO NOTHING RETURNING 1)
UPDATE %[1]s_count SET n = n + (SELECT count(*) FROM ins)`, rm)), 0o600))
	}
	common := []string{"--store", "sqlite:" + path, "--redis-url", testkit.RedisURL(), "--stream", s}
	startRole(t, freeAddr(t), append([]string{"dispatch"}, common...)...)
	startRole(t, freeAddr(t), append([]string{"work", "--postgres-url", pg.URL, "--group", prefix + "-b", "--projection", files["rm_b"], "--owns-synced=false"}, common...)...)

	const n = 60
	var inputs []outbox.Input
	for i := range n {
		inputs = append(inputs, outbox.Input{SourceKey: "s", DeviceKey: fmt.Sprintf("d%d", i%5), Type: "t",
			OccurredAt: fmt.Sprintf("2026-11-03T10:%02d:%02dZ", i/60, i%60)})
	}
	_, err := outbox.NewWriter(st, &outbox.WriterConfig{Stream: s}).Write(ctx, inputs)
	require.NoError(t, err)

	count := func(rm string) int {
		var c int
		require.NoError(t, pg.Pool.QueryRow(ctx, `SELECT n FROM `+rm+`_count`).Scan(&c))
		return c
	}
	unsynced := func() int {
		var c int
		require.NoError(t, st.DB().QueryRowContext(ctx, `SELECT count(*) FROM events WHERE synced_at IS NULL`).Scan(&c))
		return c
	}
	pending := func(group string) int64 {
		p, err := rdb.XPending(ctx, s, group).Result()
		require.NoError(t, err)
		return p.Count
	}
	// The deployment that does not own syncedAt projects and acknowledges
	// everything and syncs nothing.
	require.Eventually(t, func() bool {
		return count("rm_b") == n && pending(prefix+"-b") == 0
	}, 60*time.Second, 50*time.Millisecond, "b=%d", count("rm_b"))
	require.Equal(t, n, unsynced(), "--owns-synced=false sets no syncedAt")

	// The owner, started later, reads the stream from its start.
	startRole(t, freeAddr(t), append([]string{"work", "--postgres-url", pg.URL, "--group", prefix + "-a", "--projection", files["rm_a"]}, common...)...)
	require.Eventually(t, func() bool {
		return count("rm_a") == n && count("rm_b") == n && unsynced() == 0 &&
			pending(prefix+"-a") == 0 && pending(prefix+"-b") == 0
	}, 60*time.Second, 50*time.Millisecond, "a=%d b=%d unsynced=%d", count("rm_a"), count("rm_b"), unsynced())
	require.Equal(t, n, count("rm_a"), "counted once")
	require.Equal(t, n, count("rm_b"), "counted once")
}

// migratedSQLite opens a migrated SQLite store in dir (closed at cleanup)
// and returns it with its file's path, for roles started on it.
func migratedSQLite(t *testing.T, dir string) (*sqlitestore.Store, string) {
	t.Helper()
	path := filepath.Join(dir, "outboxd.db")
	st, err := sqlitestore.Open(context.Background(), path, nil)
	require.NoError(t, err)
	t.Cleanup(func() { _ = st.Close(context.Background()) })
	require.NoError(t, st.Migrate(context.Background(), nil))
	return st, path
}
