package worker_test

import (
	"context"
	"fmt"
	"log"
	"os"
	"path/filepath"
	"strconv"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/redis/go-redis/v9"

	"github.com/outboxd/outboxd/outbox"
	"github.com/outboxd/outboxd/store/sqlitestore"
	"github.com/outboxd/outboxd/worker"
)

// A custom Projector keeps a read model of its own: here the last time each
// device was seen, in the worker's transaction. It is idempotent (a replayed
// event cannot move last_seen) and writes the batch in one statement,
// aggregated per key so that no row is touched twice.
//
// The example runs on your Redis (redisURL) and your read model's
// PostgreSQL database (postgresURL(): here a database of its own on the
// test servers, which make test sets up); the system of record is an
// SQLite file.
func ExampleProjector() {
	ctx := context.Background()
	check := func(err error) {
		if err != nil {
			log.Fatal(err)
		}
	}

	dir, err := os.MkdirTemp("", "outboxd-example")
	check(err)
	defer os.RemoveAll(dir)
	st, err := sqlitestore.Open(ctx, filepath.Join(dir, "outboxd.db"), nil)
	check(err)
	defer st.Close(ctx)
	check(st.Migrate(ctx, nil))
	opt, err := redis.ParseURL(redisURL)
	check(err)
	rdb := redis.NewClient(opt)
	defer rdb.Close()
	pool, err := pgxpool.New(ctx, postgresURL())
	check(err)
	defer pool.Close()

	unique := strconv.FormatInt(time.Now().UnixNano(), 36)
	table := "example_device_last_seen_" + unique
	_, err = pool.Exec(ctx, "CREATE TABLE "+table+" (device_key text PRIMARY KEY, last_seen timestamptz NOT NULL)")
	check(err)
	defer pool.Exec(ctx, "DROP TABLE "+table) //nolint:errcheck
	name := "example-stream-" + unique
	defer rdb.Del(ctx, name, name+":dlq", name+":read-model:failures", name+":read-model:streak")

	lastSeen := worker.ProjectorFunc(func(ctx context.Context, tx pgx.Tx, events []*outbox.Event) error {
		devices := make([]string, len(events))
		times := make([]time.Time, len(events))
		for i, ev := range events {
			devices[i], times[i] = ev.DeviceKey, ev.OccurredAt
		}
		_, err := tx.Exec(ctx, `
			INSERT INTO `+table+` AS t (device_key, last_seen)
			SELECT d, max(o) FROM unnest($1::text[], $2::timestamptz[]) AS u(d, o) GROUP BY d ORDER BY d
			ON CONFLICT (device_key) DO UPDATE SET last_seen = GREATEST(t.last_seen, EXCLUDED.last_seen)`,
			devices, times)
		return err
	})

	// Three originals, published twice: the second copy changes nothing.
	res, err := outbox.NewWriter(st, nil).Write(ctx, []outbox.Input{
		{SourceKey: "s", DeviceKey: "d1", OccurredAt: "2026-03-01T10:00:00Z"},
		{SourceKey: "s", DeviceKey: "d1", OccurredAt: "2026-03-01T10:05:00Z"},
		{SourceKey: "s", DeviceKey: "d2", OccurredAt: "2026-03-01T09:00:00Z"},
	})
	check(err)
	ids := []string{res[0].ID, res[1].ID, res[2].ID}
	originals, err := st.LoadEvents(ctx, ids)
	check(err)
	for range 2 {
		for _, id := range ids {
			msg := originals[id].Event.Message(outbox.OriginOutbox)
			check(rdb.XAdd(ctx, &redis.XAddArgs{Stream: name, Values: msg.Values()}).Err())
		}
	}

	w, err := worker.New(st, rdb, pool, &worker.Config{Stream: name, Projector: lastSeen, Block: 50 * time.Millisecond}, nil)
	check(err)
	check(w.Start(ctx))
	// Wait until every original is synced.
	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	for deadline := time.Now().Add(20 * time.Second); time.Now().Before(deadline); <-tick.C {
		c, err := st.Counts(ctx)
		check(err)
		if c.Pending == 0 {
			break
		}
	}
	check(w.Stop(ctx))

	rows, err := pool.Query(ctx, "SELECT device_key, last_seen FROM "+table+" ORDER BY 1")
	check(err)
	for rows.Next() {
		var device string
		var seen time.Time
		check(rows.Scan(&device, &seen))
		fmt.Println(device, seen.UTC().Format(time.RFC3339))
	}
	check(rows.Err())
	// Output:
	// d1 2026-03-01T10:05:00Z
	// d2 2026-03-01T09:00:00Z
}

// deadLetterLog is a DeadLetterHook as a program outside outboxd writes
// one, with the worker's names only: it hands each dead letter's event and
// code to a channel and never blocks.
type deadLetterLog struct{ out chan<- string }

// Notify implements worker.DeadLetterHook.
func (h deadLetterLog) Notify(keys worker.StreamKeys, dl worker.DeadLetter) {
	select {
	case h.out <- keys.DLQ() + " " + dl.EventID + " " + dl.Code:
	default:
	}
}

var _ worker.DeadLetterHook = deadLetterLog{}
