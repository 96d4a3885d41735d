package main

import (
	"context"
	"fmt"
	"strconv"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/redis/go-redis/v9"

	"github.com/outboxd/outboxd/internal/readmodel"
	"github.com/outboxd/outboxd/outbox"
	"github.com/outboxd/outboxd/projection"
	"github.com/outboxd/outboxd/store/sqlitestore"
	"github.com/outboxd/outboxd/worker"
)

// Raw limits (the package doc says what each one measures).
const (
	limitInsert500   = "store-insert-500"
	limitInsert1     = "store-insert-1"
	limitMarkSynced  = "store-mark-synced"
	limitXAdd        = "redis-xadd"
	limitReadAck     = "redis-read-ack"
	limitProject     = "pg-project"
	limitProjectSQL  = "pg-project-sql"
	limitRedisToPG   = "redis-to-pg"
	limitSlowestPart = "slowest-part"
	// limitHTTP1 is measured on the ingest-single process after its stage
	// (httpCeiling).
	limitHTTP1 = "http-refused-1"
)

// Sizes of the raw measurements.
const (
	// insertBatch is the events of one store-insert-500 transaction.
	insertBatch = 500
	// xaddPipeline is the XADDs of one redis-xadd pipeline.
	xaddPipeline = 1000
	// singleFor is how long store-insert-1 runs.
	singleFor = 3 * time.Second
)

// rawLimits measures every raw limit; it keeps the originals it wrote for
// the chunk table's raw measurements.
func (b *bench) rawLimits(ctx context.Context) error {
	fmt.Fprintln(b.out, "raw limits")
	if err := b.rawStore(ctx); err != nil {
		return err
	}
	xadd, readAck, project, err := b.rawRedisAndPostgres(ctx, xaddPipeline, worker.BatchSizeDefault)
	if err != nil {
		return err
	}
	n := len(b.rawEvents)
	b.res.addLimit(b.out, limitXAdd, n, xadd)
	a := b.res.addLimit(b.out, limitReadAck, n, readAck)
	p := b.res.addLimit(b.out, limitProject, n, project)
	demo := projection.Demo()
	if err := demo.Prepare(ctx, b.be.pg); err != nil {
		return err
	}
	sqlProject, err := b.rawProject(ctx, worker.BatchSizeDefault, demo, limitProjectSQL)
	if err != nil {
		return err
	}
	b.res.addLimit(b.out, limitProjectSQL, n, sqlProject)
	r := serial(a, p)
	b.res.Limits = append(b.res.Limits, Limit{Name: limitRedisToPG, EventsPerSecond: r})
	fmt.Fprintf(b.out, "  limit %-18s %10.0f ev/s  (1/(1/%s + 1/%s))\n", limitRedisToPG, r, limitReadAck, limitProject)
	slowest := min(b.res.limit(limitInsert500), b.res.limit(limitXAdd), r)
	b.res.Limits = append(b.res.Limits, Limit{Name: limitSlowestPart, EventsPerSecond: slowest})
	fmt.Fprintf(b.out, "  limit %-18s %10.0f ev/s  (min of %s, %s, %s)\n", limitSlowestPart, slowest, limitInsert500, limitXAdd, limitRedisToPG)
	return nil
}

// rawStore measures the store's limits on a fresh SQLite file.
func (b *bench) rawStore(ctx context.Context) error {
	st, err := sqlitestore.Open(ctx, b.be.file("raw.db"), nil)
	if err != nil {
		return err
	}
	defer func() { _ = st.Close(context.Background()) }()
	if err := st.Migrate(ctx, nil); err != nil {
		return err
	}
	w := outbox.NewWriter(st, &outbox.WriterConfig{Stream: b.be.stream("raw")})
	records := func(source string, n int) ([]outbox.Event, []outbox.Entry, error) {
		inputs := make([]outbox.Input, n)
		for i := range inputs {
			inputs[i] = input(source, i)
		}
		return w.Records(inputs)
	}
	insert := func(events []outbox.Event, entries []outbox.Entry) error {
		return st.WriteTx(ctx, func(ctx context.Context, tx outbox.Tx) error {
			if err := tx.InsertEvents(ctx, events); err != nil {
				return err
			}
			return tx.InsertEntries(ctx, entries)
		})
	}

	events, entries, err := records("raw", b.n)
	if err != nil {
		return err
	}
	began := time.Now()
	for i := 0; i < len(events); i += insertBatch {
		j := min(i+insertBatch, len(events))
		if err := insert(events[i:j], entries[i:j]); err != nil {
			return fmt.Errorf("%s: %w", limitInsert500, err)
		}
	}
	b.res.addLimit(b.out, limitInsert500, len(events), time.Since(began))

	singles, singleEntries, err := records("raw-single", 100_000)
	if err != nil {
		return err
	}
	n := 0
	began = time.Now()
	for ; n < len(singles) && time.Since(began) < singleFor; n++ {
		if err := insert(singles[n:n+1], singleEntries[n:n+1]); err != nil {
			return fmt.Errorf("%s: %w", limitInsert1, err)
		}
	}
	b.res.addLimit(b.out, limitInsert1, n, time.Since(began))

	ids := make([]string, len(events))
	for i := range events {
		ids[i] = events[i].ID
	}
	at := time.Now()
	began = time.Now()
	for i := 0; i < len(ids); i += worker.BatchSizeDefault {
		if _, err := st.MarkSynced(ctx, ids[i:min(i+worker.BatchSizeDefault, len(ids))], at); err != nil {
			return fmt.Errorf("%s: %w", limitMarkSynced, err)
		}
	}
	b.res.addLimit(b.out, limitMarkSynced, len(ids), time.Since(began))

	b.rawEvents = make([]*outbox.Event, len(events))
	for i := range events {
		b.rawEvents[i] = &events[i]
	}
	return nil
}

// rawRedisAndPostgres measures pipelined XADD (pipeline entries per
// pipeline), XREADGROUP + XACK (COUNT batch) and the projection (batches
// of batch) on the raw originals, and returns how long each took for all
// of them.
func (b *bench) rawRedisAndPostgres(ctx context.Context, pipeline, batch int) (xadd, readAck, project time.Duration, err error) {
	stream := b.be.stream("raw")
	if err = b.be.rdb.Del(ctx, stream).Err(); err != nil {
		return
	}
	msgs := make([]map[string]any, len(b.rawEvents))
	for i, ev := range b.rawEvents {
		msgs[i] = ev.Message(outbox.OriginOutbox).Values()
	}
	if xadd, err = b.rawXAdd(ctx, stream, msgs, pipeline); err != nil {
		return
	}
	group := "raw-" + strconv.Itoa(batch)
	if readAck, err = b.rawReadAck(ctx, stream, group, batch, len(msgs)); err != nil {
		return
	}
	project, err = b.rawProject(ctx, batch, readmodel.NewProjector(), limitProject)
	return
}

// rawXAdd adds msgs to stream, pipeline entries per pipeline.
func (b *bench) rawXAdd(ctx context.Context, stream string, msgs []map[string]any, pipeline int) (time.Duration, error) {
	began := time.Now()
	for i := 0; i < len(msgs); i += pipeline {
		_, err := b.be.rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
			for _, m := range msgs[i:min(i+pipeline, len(msgs))] {
				p.XAdd(ctx, &redis.XAddArgs{Stream: stream, Values: m})
			}
			return nil
		})
		if err != nil {
			return 0, fmt.Errorf("%s: %w", limitXAdd, err)
		}
	}
	return time.Since(began), nil
}

// rawReadAck reads n entries of stream through a new group at 0, count at
// a time, acknowledging each read.
func (b *bench) rawReadAck(ctx context.Context, stream, group string, count, n int) (time.Duration, error) {
	rdb := b.be.rdb
	if err := rdb.XGroupCreate(ctx, stream, group, "0").Err(); err != nil {
		return 0, fmt.Errorf("%s: %w", limitReadAck, err)
	}
	defer rdb.XGroupDestroy(context.Background(), stream, group)
	began := time.Now()
	for read := 0; read < n; {
		res, err := rdb.XReadGroup(ctx, &redis.XReadGroupArgs{Group: group, Consumer: "raw", Streams: []string{stream, ">"}, Count: int64(count), Block: -1}).Result()
		if err != nil {
			return 0, fmt.Errorf("%s after %d entries: %w", limitReadAck, read, err)
		}
		ids := make([]string, 0, count)
		for _, m := range res[0].Messages {
			ids = append(ids, m.ID)
		}
		if err := rdb.XAck(ctx, stream, group, ids...).Err(); err != nil {
			return 0, fmt.Errorf("%s: %w", limitReadAck, err)
		}
		read += len(ids)
	}
	return time.Since(began), nil
}

// rawProject runs projector p (the worker's default, or the demo read
// model as a SQL projection file) on the raw originals on one connection,
// one transaction per batch, into an empty read model; name is the limit.
func (b *bench) rawProject(ctx context.Context, batch int, p worker.Projector, name string) (time.Duration, error) {
	if err := b.be.truncateReadModel(ctx); err != nil {
		return 0, err
	}
	conn, err := b.be.pg.Acquire(ctx)
	if err != nil {
		return 0, err
	}
	defer conn.Release()
	began := time.Now()
	for i := 0; i < len(b.rawEvents); i += batch {
		events := b.rawEvents[i:min(i+batch, len(b.rawEvents))]
		if err := pgx.BeginFunc(ctx, conn, func(tx pgx.Tx) error { return p.Project(ctx, tx, events) }); err != nil {
			return 0, fmt.Errorf("%s: %w", name, err)
		}
	}
	elapsed := time.Since(began)
	if err := b.be.checkReadModel(ctx, name, len(b.rawEvents)); err != nil {
		return 0, err
	}
	return elapsed, b.be.truncateReadModel(ctx)
}
