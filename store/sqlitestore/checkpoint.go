package sqlitestore

import (
	"context"
	"database/sql"
	"fmt"
	"net/url"
	"time"
)

// checkpointer copies the WAL into the database file in the background.
//
// SQLite's automatic checkpoint runs inside the COMMIT that crosses
// wal_autocheckpoint pages (1,000 by default, about 4 MB): that commit then
// copies the pages and syncs the file while it holds the write connection,
// and every writer queued behind it waits (tens of milliseconds at a few
// thousand events/s, the tail of ingest latency). Each Store therefore turns
// the automatic checkpoint off on its write connection and runs a PASSIVE
// checkpoint every Options.CheckpointInterval on a connection of its own: a
// passive checkpoint takes no write lock, so writers go on meanwhile, and it
// copies what no reader still needs (what it leaves is copied the next
// time). Several Stores on one file each run one; SQLite lets one run at a
// time and the others return at once. The WAL restarts from its beginning at
// the first write after a checkpoint that copied everything.
type checkpointer struct {
	db   *sql.DB
	stop chan struct{}
	done chan struct{}
}

// checkpointDSN returns the DSN of the checkpoint connection.
func checkpointDSN(path string, busy time.Duration) string {
	q := url.Values{}
	q.Add("_pragma", fmt.Sprintf("busy_timeout(%d)", busy.Milliseconds()))
	q.Add("_pragma", "synchronous(NORMAL)")
	return fileURI(path) + "?" + q.Encode()
}

// startCheckpointer opens the checkpoint connection and starts checkpointing
// every interval.
func startCheckpointer(ctx context.Context, path string, busy, interval time.Duration) (*checkpointer, error) {
	db, err := sql.Open(driverName, checkpointDSN(path, busy))
	if err != nil {
		return nil, fmt.Errorf("error opening SQLite store %s: %w", path, err)
	}
	db.SetMaxOpenConns(1)
	db.SetMaxIdleConns(1)
	db.SetConnMaxLifetime(0)
	db.SetConnMaxIdleTime(0)
	if err := db.PingContext(ctx); err != nil {
		_ = db.Close()
		return nil, fmt.Errorf("error opening SQLite store %s: %w", path, err)
	}
	c := &checkpointer{db: db, stop: make(chan struct{}), done: make(chan struct{})}
	go c.run(interval)
	return c, nil
}

func (c *checkpointer) run(interval time.Duration) {
	defer close(c.done)
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		select {
		case <-c.stop:
			return
		case <-t.C:
			// A failure (another process's checkpoint, a busy file) is
			// harmless: the next tick copies what this one did not.
			_, _ = c.db.Exec(`PRAGMA wal_checkpoint(PASSIVE)`)
		}
	}
}

// close stops checkpointing and closes the connection.
func (c *checkpointer) close() error {
	close(c.stop)
	<-c.done
	return c.db.Close()
}
