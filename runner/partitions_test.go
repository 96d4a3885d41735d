package runner

import (
	"bytes"
	"context"
	"fmt"
	"net/http"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/outboxd/outboxd/internal/stream"
	"github.com/outboxd/outboxd/internal/testkit"
	"github.com/outboxd/outboxd/outbox"
	"github.com/outboxd/outboxd/store"
)

// TestDevPartitions runs `outboxd dev --partitions 4`: every event is
// synced through four partitions (each partition's stream holds its
// devices' events and nothing stays pending), the status shows the four
// partitions' leases held; a restart on the same store with another
// --partitions refuses to start (exit 2) and names the procedure.
func TestDevPartitions(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "outboxd.db")
	b := startDev(t, "sqlite:"+path, "--min-age", "1h", "--partitions", "4")
	const total = 200
	for i := range total {
		code, body := b.post(t, "/v1/events", fmt.Sprintf("k-%d", i), event(i))
		require.Equal(t, http.StatusCreated, code, string(body))
	}
	require.Eventually(t, func() bool {
		s, err := b.status()
		return err == nil && s.Events != nil && s.Events.Synced == total
	}, 2*time.Minute, 50*time.Millisecond, "pipeline did not converge")
	s, err := b.status()
	require.NoError(t, err)
	require.NotNil(t, s.Dispatcher)
	require.Len(t, s.Dispatcher.Partitions, 4)
	require.NotNil(t, s.Stream)
	require.EqualValues(t, total, s.Stream.Length, "the stream's figures sum every partition's")
	require.Zero(t, s.Stream.Pending)
	for p, ps := range s.Dispatcher.Partitions {
		require.Equal(t, p, ps.Partition)
		require.True(t, ps.LeaderAlive, "partition %d has a live leader", p)
		require.Positive(t, ps.Term)
	}
	var rows int64
	require.NoError(t, b.pg.Pool.QueryRow(context.Background(), `SELECT count(*) FROM events`).Scan(&rows))
	require.EqualValues(t, total, rows)
	rdb, _ := testkit.NewRedis(t)
	for _, k := range stream.NewKeys(b.stream, b.group).Split(4).AllPartitions() {
		n, err := rdb.XLen(context.Background(), k.Stream()).Result()
		require.NoError(t, err)
		require.Positive(t, n, "partition stream %s holds events", k.Stream())
		pending, err := testkit.PendingEntries(context.Background(), rdb, k.Stream(), b.group)
		require.NoError(t, err)
		require.Zero(t, pending)
	}
	b.stop(t)

	var stderr bytes.Buffer
	code := run(context.Background(), []string{"dispatch", "--store", "sqlite:" + path, "--redis-url", testkit.RedisURL(),
		"--stream", b.stream, "--http-addr", "", "--partitions", "2"}, &stderr, &stderr)
	require.Equal(t, ExitUsage, code, stderr.String())
	require.Contains(t, stderr.String(), store.PartitionsProcedure)

	// Drained: the switch records 2, and the old number is refused now.
	var out bytes.Buffer
	code = run(context.Background(), []string{"partitions", "switch", "--store", "sqlite:" + path, "--stream", b.stream, "--to", "2"}, &out, &out)
	require.Equal(t, ExitOK, code, out.String())
	require.Contains(t, out.String(), "2 partitions recorded (was 4)")
	stderr.Reset()
	code = run(context.Background(), []string{"dispatch", "--store", "sqlite:" + path, "--redis-url", testkit.RedisURL(),
		"--stream", b.stream, "--http-addr", "", "--partitions", "4"}, &stderr, &stderr)
	require.Equal(t, ExitUsage, code, stderr.String())
}

// TestPartitionsSwitchRefusesUndrained: with an undispatched entry the
// switch exits 1, says why, and records nothing.
func TestPartitionsSwitchRefusesUndrained(t *testing.T) {
	t.Parallel()
	st := testkit.NewSQLite(t)
	name := testkit.Name("stream")
	w := outbox.NewWriter(st, &outbox.WriterConfig{Stream: name})
	_, err := w.Write(context.Background(), []outbox.Input{{SourceKey: "s", DeviceKey: "d", OccurredAt: "2026-11-01T10:00:00Z"}})
	require.NoError(t, err)
	var out bytes.Buffer
	code := run(context.Background(), []string{"partitions", "switch", "--store", "sqlite:" + st.Path(), "--stream", name, "--to", "4"}, &out, &out)
	require.Equal(t, ExitFailure, code, out.String())
	require.Contains(t, out.String(), "not drained")
	n, err := st.Partitions(context.Background(), name)
	require.NoError(t, err)
	require.Zero(t, n)
	out.Reset()
	code = run(context.Background(), []string{"partitions", "switch", "--store", "sqlite:" + st.Path(), "--stream", name, "--to", "0"}, &out, &out)
	require.Equal(t, ExitUsage, code, out.String())
}

// TestPartitionsFlagBounds: --partitions outside 1..1024 is a usage error.
func TestPartitionsFlagBounds(t *testing.T) {
	t.Parallel()
	for _, n := range []string{"0", "1025", "-3"} {
		var out bytes.Buffer
		code := run(context.Background(), []string{"dispatch", "--partitions", n}, &out, &out)
		require.Equal(t, ExitUsage, code, out.String())
		require.Contains(t, out.String(), "--partitions")
	}
}
