package store

import (
	"fmt"
	"strconv"
)

// The names of every lease and mark outboxd keeps in a store, in one place:
// two names must never collide, and an operator reading the leases table
// (or collection) finds here what each row is. The components' own
// functions (dispatcher.LeaseName, reconciler.LeaseName, …) return these.

// DispatcherLeaseName is the name of the dispatcher's lease of stream, which
// also holds its checkpoint (the feed position): the stream's name.
func DispatcherLeaseName(stream string) string { return stream }

// PartitionLeaseName is the name of the lease (and checkpoint) of part of
// stream: DispatcherLeaseName(stream) for the whole stream, so that one
// partition keeps the lease and position of an unpartitioned stream, else
// "<stream>:<index>".
func PartitionLeaseName(stream string, part Partition) string {
	if part.Whole() {
		return DispatcherLeaseName(stream)
	}
	return stream + ":" + strconv.Itoa(part.Index)
}

// MemberLeaseName is the name of member slot i of the dispatchers of a
// partitioned stream: "<stream>:dispatchers:<i>".
func MemberLeaseName(stream string, i int) string {
	return stream + ":dispatchers:" + strconv.Itoa(i)
}

// ReconcilerLeaseName is the name of the periodic reconciler's lease of
// stream: "reconciler:<stream>".
func ReconcilerLeaseName(stream string) string { return "reconciler:" + stream }

// OrderedLeaseName is the lease an ordered worker holds on partition p of
// stream's group: "work:<stream>:<group>:<p>".
func OrderedLeaseName(stream, group string, p int) string {
	return fmt.Sprintf("work:%s:%s:%d", stream, group, p)
}

// PauseLeaseName names the lease that records a pause of stage on stream:
// "pause:<stream>:<stage>". The lease is held (by the operator who
// paused, PausedBy) while the stage is paused, for PauseTTL, and released
// when it resumes; its checkpoint time is when the pause began. Every
// replica reads it, and it survives restarts as the store does.
func PauseLeaseName(stream string, stage Stage) string {
	return "pause:" + stream + ":" + stage.String()
}

// ResetLeaseName names the lease whose checkpoint time recorded the last
// reset of stream's Redis data before ResetMarkName did: LastReset reads it
// when a store migrated from an older version holds no mark yet. Nothing
// writes it any more.
//
// Deprecated: the reset is the mark ResetMarkName; this name is read for
// one version.
func ResetLeaseName(stream string) string { return "reset:" + stream }

// replayCancelLeaseName names the lease whose checkpoint time recorded the
// last cancel of stream's replays before ReplayCancelMarkName did (read,
// never written, for one version).
func replayCancelLeaseName(stream string) string { return "replay-cancel:" + stream }

// ResetMarkName is the mark (Store.SetMark) of the last reset of stream's
// Redis data: "reset:<stream>".
func ResetMarkName(stream string) string { return "reset:" + stream }

// SweepMarkName is the mark of the end of the last sweep of stream's
// reconciler, by any process: "sweep:<stream>".
func SweepMarkName(stream string) string { return "sweep:" + stream }

// ReplayCancelMarkName is the mark of the last cancel of stream's replays:
// "replay-cancel:<stream>".
func ReplayCancelMarkName(stream string) string { return "replay-cancel:" + stream }
