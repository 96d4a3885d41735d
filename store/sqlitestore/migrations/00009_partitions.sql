-- Partitions: each outbox entry records its partition, fixed at
-- ingest (outbox.PartitionOf); 0 for every entry written before, which is
-- the one partition of an unpartitioned stream. The dispatcher of
-- partition p of a stream split into several reads the feed and the
-- catch-up of that partition from the two indexes below; with one
-- partition it reads the whole stream from outbox_stream_seq and
-- outbox_undispatched as before. The number of partitions of each stream
-- is recorded, so that a process started with another number refuses to
-- start (store.EnsurePartitions).

-- +goose Up
ALTER TABLE "{outbox}" ADD COLUMN partition INTEGER NOT NULL DEFAULT 0;
-- The feed of one partition: equality on stream and partition, range and
-- order on seq.
CREATE INDEX "{outbox}_partition_seq" ON "{outbox}" (stream, partition, seq);
-- The catch-up of one partition: its undispatched entries only.
CREATE INDEX "{outbox}_partition_undispatched" ON "{outbox}" (stream, partition, seq)
    WHERE dispatched_at IS NULL;
CREATE TABLE partitions (
    stream TEXT    PRIMARY KEY,
    n      INTEGER NOT NULL
) WITHOUT ROWID;

-- +goose Down
DROP TABLE partitions;
DROP INDEX "{outbox}_partition_undispatched";
DROP INDEX "{outbox}_partition_seq";
ALTER TABLE "{outbox}" DROP COLUMN partition;
