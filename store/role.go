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
