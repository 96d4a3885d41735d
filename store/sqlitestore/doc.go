// Package sqlitestore is the SQLite store of the storage port (package
// store): one SQLite file (--store sqlite:PATH, sqlite:data/outboxd.db by
// default) for make run, single-machine setups and fast tests.
//
//	s, err := sqlitestore.Open(ctx, "data/outboxd.db", nil)
//	…
//	err = s.Migrate(ctx, nil) // outboxd migrate; Open never changes the schema
//
// # Files, processes and locks
//
// The file is in WAL mode, so reads go on while one transaction writes.
// Several processes may share it, so every role of outboxd can run as its
// own process on one file. A Store has two pools: a write pool of one
// connection, where every transaction begins with BEGIN IMMEDIATE (it takes
// the write lock before reading, so two writers never both hold a snapshot
// and then fail to upgrade it, an SQLITE_BUSY that no timeout helps), and a
// read pool of Options.ReadConns connections. Writers of one process queue
// for the write connection in Go; writers of different processes meet in
// SQLite's lock and wait up to Options.BusyTimeout (10 seconds) for it, then
// fail with store.ErrUnavailable. SQLite's lock is not fair between
// processes: a process that writes without pause can keep another waiting,
// so keep transactions short (the writer's batches are).
//
// # Durability
//
// synchronous=NORMAL: a commit is in the WAL file (written, not fsynced)
// before it returns, so it survives the crash or SIGKILL of the process
// (TestDurabilityAfterSIGKILL). It does not survive a power loss or an
// operating-system crash: the last transactions before one may be rolled
// back (the file stays consistent). Use the MongoDB store where that
// matters.
//
// # Schema
//
// The numbered files of migrations.SQLiteFiles(); times are INTEGER Unix
// milliseconds, UTC, so a time read back is the one written truncated to the
// millisecond. Every query is served by an index or a primary key, never by
// a scan of events or outbox (TestQueryPlans checks each one with EXPLAIN
// QUERY PLAN); the status counts read partial indexes that hold the backlog
// only (pending, parked, undispatched). Migrate versions the schema with
// PRAGMA user_version rather than goose's table (see migrate.go for why).
//
//   - events: the originals, a rowid in insert order, unique indexes on id
//     and idempotency_key. Originals are never deleted, so max(rowid) is
//     their exact number (Counts.Total, not estimated).
//   - outbox: the entries; seq (INTEGER PRIMARY KEY AUTOINCREMENT) is the
//     feed position (decimal ASCII) and the entry id (20 digits, zero
//     padded, so ids sort as strings in seq order). One writer at a time
//     makes seq order commit order.
//   - feed_floor: per stream, the highest seq DeleteDispatched removed; a
//     position below it is lost (store.ErrPositionLost).
//   - leases: owner, expiry, fencing term and checkpoint, one row per name.
//
// # Feeds
//
// A feed reads a stream's entries after its position from the read pool
// every FeedOptions.PollInterval (100ms by default). A commit through this
// Store's WriteTx that inserted entries wakes its feeds at once; feeds in
// other processes see it at their next poll.
//
// # Driver
//
// modernc.org/sqlite v1.62.0 (SQLite 3.54.1 translated to Go, no cgo)
// through database/sql, driver name "sqlite". driver.go holds everything
// driver-specific (the DSNs and the reading of error codes), so a switch
// rewrites that file only.
//
// It was measured beside github.com/ncruces/go-sqlite3 (the same SQLite
// compiled to WebAssembly, run by wazero) on a 2-core machine, with the
// same settings (WAL, synchronous=NORMAL, busy_timeout 10s), 100k events
// stored, medians of 3 runs, modernc vs ncruces:
//
//   - original + entry, 500 per transaction: 16.6k vs 15.5k events/s
//   - one event per transaction: 6.4k vs 6.0k events/s
//   - UPDATE … SET synced_at, 1,000 per transaction: 117k vs 115k rows/s
//   - SELECT … IN (256 keys), prepared: 132k vs 117k rows/s
//   - reading the outbox tail: 768k vs 663k rows/s
//   - two processes writing and reading one file: no error with either
//     (nor with one of each), integrity_check ok
//   - binary: 10.0 MB vs 13.3 MB; cold build about 26 s for both
//   - under -race ncruces was faster (1 run: 1.9k vs 1.6k events/s in
//     batches), which matters for tests only
//
// modernc is as fast or faster on every shape outboxd uses and gives one
// error type (*sqlite.Error) whose Code() is the extended result code
// (2067 SQLITE_CONSTRAINT_UNIQUE, 5 SQLITE_BUSY, 26 SQLITE_NOTADB), so it
// stays the default. This package's own benchmark (BenchmarkWriteTx500: key
// lookup, 500 originals and 500 entries per transaction, up to 100k stored)
// gives about 55k events/s.
package sqlitestore
