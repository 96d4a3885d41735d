//go:build unix

package sqlitestore_test

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/outboxd/outboxd/store"
	"github.com/outboxd/outboxd/store/sqlitestore"
)

// TestDurabilityAfterSIGKILL: a child process commits originals and kills
// itself with SIGKILL (no Close, no checkpoint of the WAL); the parent
// reopens the file and finds every committed row.
func TestDurabilityAfterSIGKILL(t *testing.T) {
	if path := os.Getenv(childEnv); path != "" {
		durabilityChild(t, path)
		return
	}
	t.Parallel()
	path := filepath.Join(t.TempDir(), "outboxd.db")
	cmd := exec.Command(os.Args[0], "-test.run=^TestDurabilityAfterSIGKILL$", "-test.count=1")
	cmd.Env = append(os.Environ(), childEnv+"="+path)
	out, err := cmd.CombinedOutput()
	var exit *exec.ExitError
	require.ErrorAs(t, err, &exit, "the child must die: %s", out)
	status, ok := exit.Sys().(syscall.WaitStatus)
	require.True(t, ok)
	require.True(t, status.Signaled(), "killed by a signal: %s", out)
	require.Equal(t, syscall.SIGKILL, status.Signal())
	require.FileExists(t, path+"-wal", "the child never closed the store")

	s := open(t, path, nil)
	ctx := context.Background()
	c, err := s.Counts(ctx)
	require.NoError(t, err)
	require.Equal(t, int64(1000), c.Total)
	require.Equal(t, int64(1000), c.Undispatched)
	ids := strings.Fields(string(out))
	require.NotEmpty(t, ids)
	got, err := s.LoadEvents(ctx, ids[len(ids)-1:])
	require.NoError(t, err)
	require.Len(t, got, 1, "the last committed original is there")
	f, err := s.OpenFeed(ctx, "s", store.Position("0"), store.FeedOptions{})
	require.NoError(t, err)
	defer f.Close(ctx)
	require.Len(t, drain(t, f, 1000, 10*time.Second), 1000)
}

// durabilityChild writes 1000 originals in 10 transactions, prints the id
// of the last one, and kills its own process.
func durabilityChild(t *testing.T, path string) {
	ctx := context.Background()
	s, err := sqlitestore.Open(ctx, path, nil)
	require.NoError(t, err)
	require.NoError(t, s.Migrate(ctx, nil))
	var last string
	for range 10 {
		events, entries := records(100, "s", time.Now())
		require.NoError(t, insert(ctx, s, events, entries))
		last = events[len(events)-1].ID
	}
	os.Stdout.WriteString(last + "\n")
	_ = syscall.Kill(os.Getpid(), syscall.SIGKILL)
	select {} // not reached
}
