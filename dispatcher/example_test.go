package dispatcher_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/redis/go-redis/v9"
	"go.uber.org/zap"

	"github.com/outboxd/outboxd/dispatcher"
	"github.com/outboxd/outboxd/outbox"
	"github.com/outboxd/outboxd/store/sqlitestore"
)

// A dispatcher relays what the transactional writer put into the outbox of
// a store, here an SQLite file, into a Redis stream.
func Example() {
	ctx := context.Background()
	dir, err := os.MkdirTemp("", "outboxd-example")
	if err != nil {
		panic(err)
	}
	defer os.RemoveAll(dir)
	st, err := sqlitestore.Open(ctx, filepath.Join(dir, "outboxd.db"), nil)
	if err != nil {
		panic(err)
	}
	defer st.Close(ctx)
	if err := st.Migrate(ctx, nil); err != nil {
		panic(err)
	}
	opt, err := redis.ParseURL(redisURL) // your Redis: here the test server, which make test sets up
	if err != nil {
		panic(err)
	}
	rdb := redis.NewClient(opt)
	defer rdb.Close()
	name := fmt.Sprintf("example-%d", time.Now().UnixNano())
	defer rdb.Del(ctx, name)

	w := outbox.NewWriter(st, &outbox.WriterConfig{Stream: name})
	if _, err := w.Write(ctx, []outbox.Input{{SourceKey: "s1", DeviceKey: "d1", OccurredAt: "2026-11-01T10:00:00Z"}}); err != nil {
		panic(err)
	}

	d, err := dispatcher.New(st, rdb, &dispatcher.Config{Stream: name}, zap.NewNop())
	if err != nil {
		panic(err)
	}
	if err := d.Start(ctx); err != nil {
		panic(err)
	}
	for d.Stats().Dispatched < 1 {
		time.Sleep(5 * time.Millisecond) // an example may poll; tests use require.Eventually
	}
	stopCtx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	if err := d.Stop(stopCtx); err != nil {
		panic(err)
	}

	msgs, err := rdb.XRange(ctx, name, "-", "+").Result()
	if err != nil {
		panic(err)
	}
	msg, err := outbox.DecodeMessage(msgs[0].Values)
	if err != nil {
		panic(err)
	}
	fmt.Println(len(msgs), msg.Origin, msg.DeviceKey)
	// Output: 1 outbox d1
}
