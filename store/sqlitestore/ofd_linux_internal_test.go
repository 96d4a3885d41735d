package sqlitestore

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"modernc.org/sqlite"
)

// ofdChildEnv names the file the child of TestOFDLocksSurviveAClosedDescriptor
// tries to write to.
const ofdChildEnv = "OUTBOXD_TEST_OFD_CHILD"

// TestOFDLocksSurviveAClosedDescriptor: OFD locks are on for database
// files, and closing a descriptor of the file in the process (Open's header
// check, a second Store, a backup tool reading it) leaves the locks in
// force: a child process still cannot write while a transaction holds the
// write lock. (In WAL mode the write lock itself lives in the -shm file,
// which SQLite keeps under POSIX locks and no one else opens; what OFD
// protects is the database file's shared lock, which keeps another process
// from checkpointing away or changing the journal mode under a reader.)
func TestOFDLocksSurviveAClosedDescriptor(t *testing.T) {
	if path := os.Getenv(ofdChildEnv); path != "" {
		ctx := context.Background()
		s, err := Open(ctx, path, &Options{BusyTimeout: 100 * time.Millisecond})
		require.NoError(t, err)
		defer s.Close(ctx)
		_, err = s.DB().ExecContext(ctx, `CREATE TABLE sneaky (x INTEGER)`)
		require.Error(t, err, "the child wrote while the parent held the write lock")
		return
	}
	t.Parallel()
	require.NoError(t, ofdLocking)
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "outboxd.db")
	s, err := Open(ctx, path, nil)
	require.NoError(t, err)
	defer s.Close(ctx)
	require.NoError(t, s.Migrate(ctx, nil))
	require.True(t, sqlite.OFDLockingEnabled())

	tx, err := s.DB().BeginTx(ctx, nil) // BEGIN IMMEDIATE: the write lock
	require.NoError(t, err)
	defer tx.Rollback()
	_, err = tx.ExecContext(ctx, `CREATE TABLE held (x INTEGER)`)
	require.NoError(t, err)
	f, err := os.Open(path) // what drops POSIX locks
	require.NoError(t, err)
	require.NoError(t, f.Close())

	cmd := exec.Command(os.Args[0], "-test.run=^TestOFDLocksSurviveAClosedDescriptor$", "-test.count=1")
	cmd.Env = append(os.Environ(), ofdChildEnv+"="+path)
	out, err := cmd.CombinedOutput()
	require.NoError(t, err, "child: %s", out)
}
