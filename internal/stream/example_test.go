package stream_test

import (
	"fmt"

	"github.com/outboxd/outboxd/internal/stream"
)

// Every Redis key of a stream comes from its Keys; with one partition they
// are the names outboxd has always used, and a partition's keys share one
// hash tag (one Redis Cluster slot).
func ExampleKeys() {
	k := stream.NewKeys("event-stream", "read-model")
	fmt.Println(k.Stream(), k.DLQ(), k.Failures())
	lane := k.ReplayLane() // where replays go
	fmt.Println(lane.Stream(), lane.DLQ(), lane.Failures())
	fmt.Println(k.Streak(stream.ComponentWorker), k.Streak(stream.ComponentDispatcher))
	p := k.Partition(3, 8)
	fmt.Println(p.Stream(), p.DLQ(), p.Failures(), p.Replay())
	// Output:
	// event-stream event-stream:dlq event-stream:read-model:failures
	// event-stream:replay event-stream:dlq event-stream:replay:read-model:failures
	// event-stream:read-model:streak event-stream:streak:dispatcher
	// {event-stream:3} {event-stream:3}:dlq {event-stream:3}:read-model:failures {event-stream:3}:replay
}
