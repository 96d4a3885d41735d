package stream

import (
	"cmp"
	"strconv"

	"github.com/outboxd/outboxd/outbox"
)

// GroupDefault is the default consumer group (--group): the workers that
// build the read model.
const GroupDefault = "read-model"

// Keys names the Redis keys of one stream and its consumer group. Every
// key outboxd uses comes from one of its methods, and each key from one
// method only:
//
//	Stream()    <stream>                     the stream the dispatcher fills and the group reads
//	DLQ()       <stream>:dlq                 its dead-letter stream
//	Failures()  <stream>:<group>:failures    the group's delivery budgets (a hash)
//	Replay()    <stream>:replay              the replay lane (reserved: issue 23)
//
// A stream split into partitions (issue 22) names each partition's keys
// with Partition: they share one hash tag, so that every multi-key command
// of a partition (the worker's MULTI/EXEC, its scripts) stays in one slot of
// a Redis Cluster. With one partition every key keeps the name above. The
// zero Keys is not valid; use NewKeys.
type Keys struct {
	name, group           string
	partition, partitions int
}

// NewKeys returns the keys of stream (the name outbox entries carry,
// --stream; defaults to outbox.StreamDefault) and group (--group; defaults
// to GroupDefault), unpartitioned.
func NewKeys(stream, group string) Keys {
	return Keys{name: cmp.Or(stream, outbox.StreamDefault), group: cmp.Or(group, GroupDefault), partitions: 1}
}

// Partition returns the keys of partition p (0 ≤ p < n) of the stream
// split into n partitions: the partition's stream is "{<stream>:<p>}", and
// its other keys carry the same hash tag ("{<stream>:<p>}:dlq", …). With
// n ≤ 1 it returns k unchanged, so an unpartitioned stream keeps its names.
func (k Keys) Partition(p, n int) Keys {
	if n <= 1 {
		return NewKeys(k.name, k.group)
	}
	k.partition, k.partitions = p, n
	return k
}

// Name is the stream's name as configured (--stream), the one outbox
// entries carry, whatever the partition.
func (k Keys) Name() string { return k.name }

// Group is the consumer group.
func (k Keys) Group() string { return k.group }

// Stream is the key of the stream (of the partition).
func (k Keys) Stream() string {
	if k.partitions <= 1 {
		return k.name
	}
	return "{" + k.name + ":" + strconv.Itoa(k.partition) + "}"
}

// DLQ is the key of the dead-letter stream.
func (k Keys) DLQ() string { return k.Stream() + ":dlq" }

// Failures is the key of the hash that holds the group's delivery budgets:
// per stream entry id, how many of its deliveries failed because of the
// record itself. An entry leaves it when it is acknowledged; outages and
// hand-overs between consumers never count.
func (k Keys) Failures() string { return k.Stream() + ":" + k.group + ":failures" }

// Replay is the key of the replay lane: replays read only while the live
// stream is empty. Reserved for issue 23; nothing uses it yet.
func (k Keys) Replay() string { return k.Stream() + ":replay" }
