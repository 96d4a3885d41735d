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
// A third connection per Store checkpoints the WAL into the file every
// Options.CheckpointInterval (PASSIVE: it takes no write lock); SQLite's
// automatic checkpoint, which would run inside a commit and hold every
// queued writer, is off (see checkpointer). When the WAL passes 64 MiB
// the checkpointer copies what is left on the write connection, between two
// transactions, so that the WAL restarts under a load that never pauses.
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
// The numbered files of its migrations/ folder, embedded in the package
// (so it needs neither goose nor pgx); times are INTEGER Unix
// milliseconds, UTC, so a time read back is the one written truncated to the
// millisecond. Every query is served by an index or a primary key, never by
// a scan of events or outbox (TestQueryPlans checks each one with EXPLAIN
// QUERY PLAN); the status counts read partial indexes that hold the backlog
// only (pending, parked, undispatched). Migrate versions the schema with
// PRAGMA user_version rather than goose's table (see migrate.go for why).
//
//   - events: the originals, a rowid in insert order, unique indexes on id
//     and idempotency_key. Only DeleteSynced (the event retention) deletes
//     originals, never the newest, and counts them in events_removed, so
//     max(rowid) minus that count is their exact number (Counts.Total, not
//     estimated).
//   - outbox: the entries; seq (INTEGER PRIMARY KEY AUTOINCREMENT) is the
//     feed position (decimal ASCII) and the entry id (20 digits, zero
//     padded, so ids sort as strings in seq order). One writer at a time
//     makes seq order commit order.
//   - feed_floor: per stream, the highest seq DeleteDispatched removed; a
//     position below it is lost (store.ErrPositionLost).
//   - leases: owner, expiry, fencing term and checkpoint, one row per name.
//
// events and outbox each have a traceparent column (schema 7): the W3C
// trace context of the ingest request, NULL when it was not traced.
//
// events and outbox are the default names of the two tables a service may
// rename to keep its own beside them (Options.EventsTable,
// Options.OutboxTable; their indexes are named after them, events_id
// becoming outboxd_events_id); the other tables keep their names. Migrate
// refuses a table of those names that outboxd did not create
// (store.ErrForeign).
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
// driver-specific (the DSNs, the lock mode and the reading of error codes),
// so a switch rewrites that file only.
//
// It was measured beside github.com/ncruces/go-sqlite3 v0.37.0 (the same
// SQLite translated to Go through wasm2go) on a 2-core machine with the same
// settings (WAL, synchronous=NORMAL, busy_timeout 10s, BEGIN IMMEDIATE),
// 100k events stored, medians of 3 interleaved runs, modernc vs ncruces:
//
//   - original + entry, 500 per transaction: 16.2k vs 17.1k events/s
//   - one event per transaction: 6.3k vs 6.4k events/s (8 goroutines: 6.8k
//     vs 6.8k; they queue for the one write connection either way)
//   - UPDATE … SET synced_at, 1,000 per transaction: 120k vs 121k rows/s
//   - SELECT … IN (256 ids): 120k vs 121k rows/s
//   - reading the outbox tail: 661k vs 698k rows/s
//   - two processes writing and reading one file: no error with either (nor
//     with one of each), integrity_check ok
//   - stripped binary 6.6 MB vs 7.6 MB; memory per connection 4.1 vs 2.4 MB;
//     under -race ncruces compiles and runs 1.1–1.5× faster (tests only)
//
// Every difference is within the run-to-run noise (±10–15%). modernc stays
// because it is 1.x with a stable API and SQLite's own unix VFS (ncruces is
// pre-1.0, brings its own VFS, reads DSN parameters only after "file:" and
// turns foreign keys on by default), and because its one error type
// (*sqlite.Error) carries the extended result code (2067 UNIQUE, 1555
// PRIMARY KEY, 5 BUSY, 26 NOTADB), where ncruces returns busy errors as a
// bare code. One modernc default does not suit outboxd, which opens one file
// from several Stores in a process (and reads its header in Open): SQLite's
// POSIX locks on the database file are dropped by the kernel when any
// descriptor of that file is closed in the process. The package therefore
// turns on Linux OFD locks (sqlite.OFDLocking) before the first open; they
// belong to the open file description and survive such a close. (WAL's write
// lock lives in the -shm file, which only SQLite opens.)
//
// make bench measures the store's own limits beside every stage
// (docs/benchmarks.md): 500 originals and their entries per transaction at
// about 29k events/s, one event per transaction at about 3.6k/s, on 2 cores.
package sqlitestore
