package mongostore

import (
	"context"
	"strconv"
	"strings"

	"github.com/256dpi/lungo"
	"go.mongodb.org/mongo-driver/bson/primitive"
	"go.mongodb.org/mongo-driver/mongo/options"
)

// ClusterTimePosition returns the read-after position (outbox.Entry.ReadAfter,
// outbox.Message.ReadAfter) the store's feed writes for a change event of
// cluster time ts: "<seconds>.<increment>" in decimal, a few bytes in the
// stream message; "" for the zero time. It is exported for the tests and
// tools that read a change stream of their own and compare.
func ClusterTimePosition(ts primitive.Timestamp) string {
	if ts.IsZero() {
		return ""
	}
	return strconv.FormatUint(uint64(ts.T), 10) + "." + strconv.FormatUint(uint64(ts.I), 10)
}

// parseClusterTime reads a position ClusterTimePosition wrote, and reports
// false for anything else ("", another store's position, a garbled one,
// the zero time).
func parseClusterTime(s string) (primitive.Timestamp, bool) {
	t, i, ok := strings.Cut(s, ".")
	if !ok {
		return primitive.Timestamp{}, false
	}
	secs, err := strconv.ParseUint(t, 10, 32)
	if err != nil || secs == 0 {
		return primitive.Timestamp{}, false
	}
	inc, err := strconv.ParseUint(i, 10, 32)
	if err != nil {
		return primitive.Timestamp{}, false
	}
	return primitive.Timestamp{T: uint32(secs), I: uint32(inc)}, true
}

// latestClusterTime returns the latest cluster time among positions, and
// false when none of them is one.
func latestClusterTime(positions []string) (primitive.Timestamp, bool) {
	var latest primitive.Timestamp // parseClusterTime refuses T 0: any position is after it
	for _, p := range positions {
		if ts, ok := parseClusterTime(p); ok && ts.After(latest) {
			latest = ts
		}
	}
	return latest, !latest.IsZero()
}

// readAfter runs read so that its reads see every write committed at or
// before the latest cluster time of positions (store.WithReadAfter): in a
// causally consistent session whose operation time is that cluster time,
// so the driver sends each of its commands with readConcern {level:
// majority, afterClusterTime} and the server (every shard the read
// reaches) answers from a snapshot that holds the commit. Without such a
// position, and on lungo (whose reads always see every commit, and whose
// sessions have no operation time), read runs on ctx as it is.
//
// A server refuses a cluster time later than its own clock with
// InvalidOptions (72): a shard that took no part in the commit and has
// not heard of that time yet. The store then reads again without the
// position, as it read before the position was carried (the worker keeps
// an original it does not find pending and reads it again at the next
// delivery).
func (s *Store) readAfter(ctx context.Context, positions []string, read func(ctx context.Context) error) error {
	if s.lungo {
		return read(ctx)
	}
	ts, ok := latestClusterTime(positions)
	if !ok {
		return read(ctx)
	}
	sess, err := s.client.StartSession(options.Session().SetCausalConsistency(true))
	if err != nil {
		return wrap(err, "starting a session to read after cluster time %s", ClusterTimePosition(ts))
	}
	defer sess.EndSession(context.WithoutCancel(ctx)) // no command: the server session goes back to the pool
	if err := sess.AdvanceOperationTime(&ts); err != nil {
		return wrap(err, "reading after cluster time %s", ClusterTimePosition(ts))
	}
	err = lungo.WithSession(ctx, sess, func(sc lungo.ISessionContext) error { return read(sc) })
	if err != nil && ctx.Err() == nil && hasCode(err, codeInvalidOptions) {
		return read(ctx)
	}
	return err
}
