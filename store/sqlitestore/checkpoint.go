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
// time and the others return at once.
//
// The WAL restarts from its beginning only at a write that begins while
// every frame is copied (and no reader still reads an older one). Under a
// steady load a write is always running or queued, so a checkpoint beside
// them never catches up: frames written while it copies are left for the
// next one, and the WAL grew without end (10 GB in the 90 seconds of make
// load, every frame appended to a file that kept growing, which costs the
// commit about twice an overwrite). So when a checkpoint leaves the WAL at
// walRestartFrames or more, the checkpointer runs one more on the write
// connection: no write of this process runs meanwhile, so it copies what
// the first left (the frames written while that one ran) and the next write
// restarts the WAL; the writers queued behind it wait for that copy only.
// A reader that holds an old snapshot the whole time (a long export) still
// keeps the WAL from restarting until it ends: SQLite cannot overwrite what
// it reads.
type checkpointer struct {
	db *sql.DB
	// write is the Store's write pool (one connection).
	write *sql.DB
	// restartFrames is the WAL's size, in frames, from which a checkpoint
	// on the write connection follows (walRestartFrames).
	restartFrames int
	stop          chan struct{}
	done          chan struct{}
}

// walRestartFrames is the WAL's size, in frames, from which the
// checkpointer makes it restart: 16,384 pages of 4 KiB are 64 MiB, the
// journal_size_limit to which a restarted WAL is cut back, so the file
// stays within it and a frame overwrites one of an earlier round. A
// smaller figure copies in the write connection's turn more often; in a
// benchmark stage of 40,000 events, 4,096 cost batch ingest 5%.
const walRestartFrames = 16384

// checkpointDSN returns the DSN of the checkpoint connection.
func checkpointDSN(path string, busy time.Duration) string {
	q := url.Values{}
	q.Add("_pragma", fmt.Sprintf("busy_timeout(%d)", busy.Milliseconds()))
	q.Add("_pragma", "synchronous(NORMAL)")
	return fileURI(path) + "?" + q.Encode()
}

// startCheckpointer opens the checkpoint connection and starts checkpointing
// every interval.
func startCheckpointer(ctx context.Context, write *sql.DB, path string, busy, interval time.Duration, restartFrames int) (*checkpointer, error) {
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
	c := &checkpointer{db: db, write: write, restartFrames: restartFrames, stop: make(chan struct{}), done: make(chan struct{})}
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
			c.checkpoint()
		}
	}
}

// checkpoint copies the WAL into the file beside the writers, then, when
// the WAL holds restartFrames or more, again on the write connection. A
// failure (another process's checkpoint, a busy file) is harmless: the
// next tick copies what this one did not.
func (c *checkpointer) checkpoint() {
	if frames, err := passiveCheckpoint(c.db); err != nil || frames < c.restartFrames {
		return
	}
	_, _ = passiveCheckpoint(c.write)
}

// passiveCheckpoint runs a PASSIVE checkpoint on a connection of db and
// returns the number of frames in the WAL.
func passiveCheckpoint(db *sql.DB) (frames int, err error) {
	var busy, copied int
	err = db.QueryRow(`PRAGMA wal_checkpoint(PASSIVE)`).Scan(&busy, &frames, &copied)
	return frames, err
}

// close stops checkpointing and closes the connection.
func (c *checkpointer) close() error {
	close(c.stop)
	<-c.done
	return c.db.Close()
}
