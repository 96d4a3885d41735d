package dispatcher_test

import (
	"context"
	"fmt"
	"time"

	"github.com/redis/go-redis/v9"
	"go.uber.org/zap"

	"github.com/outboxd/outboxd/dispatcher"
	"github.com/outboxd/outboxd/internal/mongodb"
	"github.com/outboxd/outboxd/internal/testkit"
	"github.com/outboxd/outboxd/migrations"
	"github.com/outboxd/outboxd/outbox"
)

// A dispatcher relays what the transactional writer put into the outbox.
func Example() {
	ctx := context.Background()
	conn, err := mongodb.Open(ctx, mongodb.EmbeddedMemory, nil)
	if err != nil {
		panic(err)
	}
	defer conn.Close(ctx)
	db := conn.Client.Database("outboxd")
	if err := migrations.Mongo(ctx, db, nil); err != nil {
		panic(err)
	}
	opt, err := redis.ParseURL(testkit.RedisURL())
	if err != nil {
		panic(err)
	}
	rdb := redis.NewClient(opt)
	defer rdb.Close()
	stream := testkit.Name("example")
	defer rdb.Del(ctx, stream)

	w := outbox.NewWriter(db, &outbox.WriterConfig{Stream: stream})
	if _, err := w.Write(ctx, []outbox.Input{{SourceKey: "s1", DeviceKey: "d1", OccurredAt: "2026-11-01T10:00:00Z"}}); err != nil {
		panic(err)
	}

	d, err := dispatcher.New(db, rdb, &dispatcher.Config{Stream: stream}, zap.NewNop())
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
	d.Stop(stopCtx)

	msgs, err := rdb.XRange(ctx, stream, "-", "+").Result()
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
