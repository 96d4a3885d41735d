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
//	Replay()    <stream>:replay              the replay lane: replays, read when the stream has nothing
//	Streak(c)   <stream>:<group>:streak      the error-streak rule of the group's workers (c = "worker"),
//	            <stream>:streak:<c>          and of another component c ("dispatcher")
//
// ReplayLane returns the keys of the replay lane seen as a stream of its
// own (its Stream is Replay), which the worker consumes with the same group.
//
// A stream split into partitions names each partition's keys
// with Partition: they share one hash tag, so that every multi-key command
// of a partition (the worker's MULTI/EXEC, its scripts) stays in one slot of
// a Redis Cluster. With one partition every key keeps the name above. The
// zero Keys is not valid; use NewKeys.
type Keys struct {
	name, group           string
	partition, partitions int
	// lane is "" for the stream, laneReplay for its replay lane.
	lane string
}

// laneReplay is the suffix of the replay lane's key.
const laneReplay = "replay"

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
		p, n = 0, 1
	}
	k.partition, k.partitions = p, n
	return k
}

// ReplayLane returns the keys of k's replay lane as a stream of its own:
// Stream is k.Replay(), Failures the lane's delivery budgets
// (<stream>:replay:<group>:failures: the entry ids of two streams may be
// equal, so the lanes keep their budgets apart), while DLQ, Replay and
// Streak stay k's (one dead-letter stream for both lanes). The worker reads
// it with the same consumer group, only when the stream has nothing for it.
func (k Keys) ReplayLane() Keys {
	k.lane = laneReplay
	return k
}

// Live returns the keys of the stream itself (k when it is not a lane).
func (k Keys) Live() Keys {
	k.lane = ""
	return k
}

// IsReplayLane reports whether k are the keys of a replay lane.
func (k Keys) IsReplayLane() bool { return k.lane == laneReplay }

// Names of the lanes, as Lane returns them.
const (
	LaneLive   = "live"
	LaneReplay = laneReplay
)

// Lane names the lane of k: LaneLive for the stream, LaneReplay for its
// replay lane.
func (k Keys) Lane() string {
	if k.IsReplayLane() {
		return LaneReplay
	}
	return LaneLive
}

// Name is the stream's name as configured (--stream), the one outbox
// entries carry, whatever the partition.
func (k Keys) Name() string { return k.name }

// Group is the consumer group.
func (k Keys) Group() string { return k.group }

// Stream is the key of the stream (of the partition; of the replay lane
// for the keys ReplayLane returns).
func (k Keys) Stream() string {
	if k.lane != "" {
		return k.base() + ":" + k.lane
	}
	return k.base()
}

// base is the key of the stream of the partition, whatever the lane.
func (k Keys) base() string {
	if k.partitions <= 1 {
		return k.name
	}
	return "{" + k.name + ":" + strconv.Itoa(k.partition) + "}"
}

// DLQ is the key of the dead-letter stream (one for the stream and its
// replay lane).
func (k Keys) DLQ() string { return k.base() + ":dlq" }

// Failures is the key of the hash that holds the group's delivery budgets:
// per stream entry id, how many of its deliveries failed because of the
// record itself. An entry leaves it when it is acknowledged; outages and
// hand-overs between consumers never count.
func (k Keys) Failures() string { return k.Stream() + ":" + k.group + ":failures" }

// Replay is the key of the replay lane: the operator's replays and DLQ
// replays go there, and the workers read it only when the stream has
// nothing for them, at a bounded rate.
func (k Keys) Replay() string { return k.base() + ":" + laneReplay }

// ProjectionRate is the key of the group's live projection rate
// (Client.Throttle): "<stream>:<group>:projection-rate", one for every
// partition, shared by the group's workers of every process.
func (k Keys) ProjectionRate() string { return k.name + ":" + k.group + ":projection-rate" }

// Components with an error-streak rule, as Streak names them.
const (
	// ComponentWorker: the workers of the consumer group.
	ComponentWorker = "worker"
	// ComponentDispatcher: the dispatchers of the stream.
	ComponentDispatcher = "dispatcher"
)

// Streak is the key of the hash that holds the error-streak rule of a
// component for the whole of it (every process): for the workers
// (ComponentWorker) of the group, <stream>:<group>:streak; for another
// component (the dispatcher), <stream>:streak:<component>.
func (k Keys) Streak(component string) string {
	if component == ComponentWorker {
		return k.base() + ":" + k.group + ":streak"
	}
	return k.base() + ":streak:" + component
}
