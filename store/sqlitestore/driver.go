package sqlitestore

// Everything that depends on the SQLite driver lives in this file: the driver
// name, the DSNs and the reading of its error codes. Switching to another
// database/sql driver for SQLite (github.com/ncruces/go-sqlite3, say) means
// rewriting this file only.

import (
	"errors"
	"fmt"
	"net/url"
	"strings"
	"time"

	"modernc.org/sqlite"
	sqlite3 "modernc.org/sqlite/lib"
)

// driverName is the database/sql driver modernc.org/sqlite registers.
const driverName = "sqlite"

// ofdLocking is the result of turning on Linux OFD locks for database
// files, process-wide, before the first open (see doc.go, "Driver"):
// modernc's default POSIX locks are dropped by the kernel whenever any
// descriptor of the file is closed in the process, which two Stores on one
// file (or Open's header check) would do. Elsewhere than Linux the call
// fails with sqlite.ErrOFDLockingUnavailable and POSIX locks stay.
var ofdLocking = func() error {
	_, err := sqlite.OFDLocking(true)
	return err
}()

// writeDSN returns the DSN of the write pool. Every transaction begins with
// BEGIN IMMEDIATE (_txlock=immediate): it takes the write lock at BEGIN, so
// two writers never both hold a read snapshot and then fail to upgrade it
// (SQLITE_BUSY without waiting, which busy_timeout cannot help). WAL lets
// readers go on while one transaction writes; synchronous=NORMAL writes the
// WAL without an fsync per commit (see doc.go for what that keeps). The
// checkpoints run in the background (see checkpointer).
func writeDSN(path string, busy time.Duration) string {
	q := url.Values{}
	q.Add("_pragma", fmt.Sprintf("busy_timeout(%d)", busy.Milliseconds()))
	q.Add("_pragma", "journal_mode(WAL)")
	q.Add("_pragma", "synchronous(NORMAL)")
	q.Add("_pragma", "wal_autocheckpoint(0)") // see checkpointer
	// A WAL that a burst grew is cut back to 64 MiB when it restarts.
	q.Add("_pragma", "journal_size_limit(67108864)")
	// 8 MiB of page cache per connection (SQLite's default is 2 MiB): the
	// hot index pages of a store past 100,000 events stay in memory. More
	// costs each commit (SQLite walks the cache when a transaction ends):
	// with 32 MiB, single-event ingest was 10% slower and the peak RSS of
	// the benchmark 136 MiB instead of 95 MiB.
	q.Add("_pragma", "cache_size(-8192)")
	// RETURNING collects its rows in a temporary table: in memory, not in a
	// temporary file.
	q.Add("_pragma", "temp_store(MEMORY)")
	q.Set("_txlock", "immediate")
	return fileURI(path) + "?" + q.Encode()
}

// readDSN returns the DSN of the read pool: the same file, deferred
// transactions (a read never takes the write lock) and query_only, so a write
// sent to the wrong pool fails instead of bypassing the write queue.
func readDSN(path string, busy time.Duration) string {
	q := url.Values{}
	q.Add("_pragma", fmt.Sprintf("busy_timeout(%d)", busy.Milliseconds()))
	q.Add("_pragma", "synchronous(NORMAL)")
	q.Add("_pragma", "query_only(1)")
	q.Add("_pragma", "cache_size(-8192)")
	return fileURI(path) + "?" + q.Encode()
}

// fileURI returns path as an SQLite URI filename, escaping the characters
// that would end the path part.
func fileURI(path string) string {
	r := strings.NewReplacer("%", "%25", "?", "%3f", "#", "%23")
	return "file:" + r.Replace(path)
}

// code returns the extended result code of an SQLite error, and false when
// err is not one.
func code(err error) (int, bool) {
	var e *sqlite.Error
	if !errors.As(err, &e) {
		return 0, false
	}
	return e.Code(), true
}

// isUniqueViolation reports a UNIQUE constraint failure.
func isUniqueViolation(err error) bool {
	c, ok := code(err)
	return ok && c == sqlite3.SQLITE_CONSTRAINT_UNIQUE
}

// isNotADatabase reports a file that SQLite does not recognise as a database.
func isNotADatabase(err error) bool {
	c, ok := code(err)
	return ok && c&0xff == sqlite3.SQLITE_NOTADB
}

// isUnavailable reports an SQLite error that means "cannot serve now": the
// lock was not granted within busy_timeout, the disk failed or is full, the
// file cannot be opened or written.
func isUnavailable(err error) bool {
	c, ok := code(err)
	if !ok {
		return false
	}
	switch c & 0xff { // the primary code
	case sqlite3.SQLITE_BUSY, sqlite3.SQLITE_LOCKED, sqlite3.SQLITE_IOERR, sqlite3.SQLITE_FULL,
		sqlite3.SQLITE_CANTOPEN, sqlite3.SQLITE_READONLY, sqlite3.SQLITE_PROTOCOL, sqlite3.SQLITE_NOMEM,
		sqlite3.SQLITE_INTERRUPT:
		return true
	}
	return false
}
