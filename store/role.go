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
