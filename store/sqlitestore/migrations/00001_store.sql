-- The SQLite store of outboxd (store/sqlitestore). Times are INTEGER Unix
-- milliseconds, UTC. sqlitestore.Migrate applies the Up section of each
-- numbered file in one BEGIN IMMEDIATE transaction and records the number in
-- PRAGMA user_version (see store/sqlitestore/migrate.go for why not goose's
-- version table); the goose annotations keep the files in goose's format.
-- {events} and {outbox} stand for the names of the two tables
-- (sqlitestore.Options.EventsTable and OutboxTable), which Migrate puts in;
-- their indexes are named after them.

-- +goose Up

-- The originals. rowid is assigned in insert order and no operation of the
-- storage port deletes an original, so max(rowid) is the number of originals
-- (Counts.Total) without counting them.
CREATE TABLE "{events}" (
    rowid            INTEGER PRIMARY KEY,
    id               TEXT    NOT NULL,
    idempotency_key  TEXT    NOT NULL,
    source_key       TEXT    NOT NULL,
    device_key       TEXT    NOT NULL,
    type             TEXT    NOT NULL,
    occurred_at      INTEGER NOT NULL,
    -- canonical JSON object, as the writer gave it
    payload          TEXT    NOT NULL,
    content_hash     TEXT    NOT NULL,
    created_at       INTEGER NOT NULL,
    synced_at        INTEGER,
    last_requeued_at INTEGER,
    requeue_count    INTEGER NOT NULL DEFAULT 0,
    -- JSON of outbox.SyncFailure, NULL while not parked
    sync_failure     TEXT,
    -- copy of sync_failure's category, so failures count by category from
    -- an index
    failure_category TEXT
);

-- LoadEvents, MarkSynced, Park, Claim, RollbackClaim (by id).
CREATE UNIQUE INDEX "{events}_id" ON "{events}" (id);
-- LookupKeys, EventByKey; the unique constraint that makes a concurrent
-- writer of the same key fail with outbox.ErrDuplicateKey.
CREATE UNIQUE INDEX "{events}_idempotency_key" ON "{events}" (idempotency_key);
-- Pending originals only (no syncedAt, no syncFailure): serves Candidates
-- (range and order on created_at, filter on last_requeued_at from the index),
-- Counts.Pending (count of the index) and Counts.OldestPending (its first
-- entry). Synced originals leave the index, so it stays the size of the
-- backlog.
CREATE INDEX "{events}_pending" ON "{events}" (created_at, last_requeued_at)
    WHERE synced_at IS NULL AND sync_failure IS NULL;
-- Parked originals only: Counts.Failed and FailedByCategory.
CREATE INDEX "{events}_failed" ON "{events}" (failure_category)
    WHERE sync_failure IS NOT NULL AND synced_at IS NULL;

-- The outbox. seq is the feed's position and the entry id; AUTOINCREMENT
-- never hands out a number twice, even after the newest entries were
-- deleted, so a position always names one place in the feed.
CREATE TABLE "{outbox}" (
    seq           INTEGER PRIMARY KEY AUTOINCREMENT,
    event_id      TEXT    NOT NULL,
    stream        TEXT    NOT NULL,
    -- the JSON that goes into the stream entry's payload field
    message       TEXT    NOT NULL,
    created_at    INTEGER NOT NULL,
    dispatched_at INTEGER
);

-- The feed: a stream's entries after a position, in seq order.
CREATE INDEX "{outbox}_stream_seq" ON "{outbox}" (stream, seq);
-- Undispatched entries only: Undispatched (catch-up) and
-- Counts.Undispatched. Entries leave it when they are dispatched.
CREATE INDEX "{outbox}_undispatched" ON "{outbox}" (stream, seq)
    WHERE dispatched_at IS NULL;
-- Dispatched entries only, by dispatch time: DeleteDispatched (retention).
CREATE INDEX "{outbox}_dispatched_at" ON "{outbox}" (dispatched_at)
    WHERE dispatched_at IS NOT NULL;

-- The highest seq DeleteDispatched removed, per stream: a feed position
-- below it is lost.
CREATE TABLE feed_floor (
    stream TEXT    PRIMARY KEY,
    seq    INTEGER NOT NULL
) WITHOUT ROWID;

-- Leases (one per stream's dispatcher) with their fencing term and the
-- dispatcher's checkpoint.
CREATE TABLE leases (
    name          TEXT    PRIMARY KEY,
    owner         TEXT    NOT NULL,
    expires_at    INTEGER NOT NULL,
    term          INTEGER NOT NULL,
    -- the feed position of the last checkpoint (a decimal seq), NULL: none
    position      TEXT,
    checkpoint_at INTEGER
) WITHOUT ROWID;

-- +goose Down
DROP TABLE leases;
DROP TABLE feed_floor;
DROP TABLE "{outbox}";
DROP TABLE "{events}";
