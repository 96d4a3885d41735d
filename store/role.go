package store

import "context"

// roleKey is the context key of WithRole.
type roleKey struct{}

// The roles WithRole names in outboxd (cmd/outboxd labels each
// component's context with its own).
const (
	RoleIngest     = "ingest"
	RoleDispatcher = "dispatcher"
	RoleWorker     = "worker"
	RoleReconciler = "reconciler"
	RoleAudit      = "audit"
)

// WithRole returns ctx labelled with the role (a component: ingest,
// dispatcher, worker, …) whose store calls it carries. A store may use the
// label to measure its work by role (sqlitestore's writer wait); it never
// changes what a call does.
func WithRole(ctx context.Context, role string) context.Context {
	return context.WithValue(ctx, roleKey{}, role)
}

// RoleOf returns the role WithRole set on ctx, or "" when none was.
func RoleOf(ctx context.Context) string {
	r, _ := ctx.Value(roleKey{}).(string)
	return r
}

// eventKeysKey is the context key of WithEventKeys.
type eventKeysKey struct{}

// WithEventKeys returns ctx carrying the idempotency keys of the originals
// a read names, by event id, as the stream messages carry them: a hint
// for Store.LoadEvents, which a store may use to reach the originals
// faster (MongoDB with events sharded on idempotencyKey targets the shards
// that hold those keys instead of asking every shard by _id). A store
// never trusts the hint for the result: what it does not find with the
// keys it reads by id.
func WithEventKeys(ctx context.Context, keys map[string]string) context.Context {
	return context.WithValue(ctx, eventKeysKey{}, keys)
}

// EventKeysOf returns the keys WithEventKeys set on ctx for ids, in the
// order of ids, or nil when ctx does not carry the key of each of them.
func EventKeysOf(ctx context.Context, ids []string) []string {
	keys, _ := ctx.Value(eventKeysKey{}).(map[string]string)
	if keys == nil {
		return nil
	}
	out := make([]string, 0, len(ids))
	for _, id := range ids {
		k := keys[id]
		if k == "" {
			return nil
		}
		out = append(out, k)
	}
	return out
}

// readAfterKey is the context key of WithReadAfter.
type readAfterKey struct{}

// WithReadAfter returns ctx carrying read-after positions for
// Store.LoadEvents: the positions of the commits that wrote the originals a
// read names, as the stream messages carry them (outbox.Message.ReadAfter,
// which the store's own feed set in outbox.Entry.ReadAfter). A store whose
// reads may lag a commit reads the originals at or after the latest of
// them (MongoDB: readConcern afterClusterTime, so that a read right after
// a transaction that spanned shards sees it on every shard); a store
// whose reads always see every committed write (SQLite) ignores them. A
// store ignores a position it cannot read (another store's, a garbled
// one), and "" is no position. The positions are opaque: only the store
// that wrote them compares them.
//
// It is a context value, not a parameter of LoadEvents, so that the port
// keeps its signature: a store of an adopter's own that does not know the
// positions reads as before.
func WithReadAfter(ctx context.Context, positions ...string) context.Context {
	if len(positions) == 0 {
		return ctx
	}
	return context.WithValue(ctx, readAfterKey{}, positions)
}

// ReadAfterOf returns the positions WithReadAfter set on ctx, or nil.
func ReadAfterOf(ctx context.Context) []string {
	p, _ := ctx.Value(readAfterKey{}).([]string)
	return p
}

// currentCountsKey is the context key of WithCurrentCounts.
type currentCountsKey struct{}

// WithCurrentCounts returns ctx asking Store.Counts for figures that hold
// every write committed before the call: a store that serves them from a
// cache or from a replica that may lag (MongoDB's CountsTTL and
// CountsMaxStaleness) reads them afresh on its primary. A check that
// decides on the figures (SwitchPartitions' drain check) asks for it; the
// status page and the gauges do not.
func WithCurrentCounts(ctx context.Context) context.Context {
	return context.WithValue(ctx, currentCountsKey{}, true)
}

// CurrentCountsOf reports whether ctx asks for current counts
// (WithCurrentCounts).
func CurrentCountsOf(ctx context.Context) bool {
	v, _ := ctx.Value(currentCountsKey{}).(bool)
	return v
}
