// Package mongoseam reaches the insides of a MongoDB store
// (mongostore.Store) through lungo's interfaces, for this module's tests and
// tools only: the store's exported API speaks the official driver's types,
// and lungo, the in-process engine the tests run it on, stays behind this
// seam. mongostore registers the hooks when it is linked in.
package mongoseam

import (
	"context"

	"github.com/256dpi/lungo"

	"github.com/outboxd/outboxd/outbox"
)

// Hooks are what mongostore hands this package. Each takes a
// *mongostore.Store (as any: this package cannot import mongostore, which
// imports it).
type Hooks struct {
	// Database returns the store's database.
	Database func(store any) lungo.IDatabase
	// RunTx is the store's RunTx with lungo's session context, which works
	// on lungo's engine too.
	RunTx func(ctx context.Context, store any, fn func(sc lungo.ISessionContext, tx outbox.Tx) error) error
}

var hooks Hooks

// Register sets the hooks (mongostore's init).
func Register(h Hooks) { hooks = h }

// Database returns the database of store, a *mongostore.Store.
func Database(store any) lungo.IDatabase { return hooks.Database(store) }

// RunTx runs fn in one transaction of store, a *mongostore.Store, with the
// store's transaction loop (mongostore.Store.RunTx).
func RunTx(ctx context.Context, store any, fn func(sc lungo.ISessionContext, tx outbox.Tx) error) error {
	return hooks.RunTx(ctx, store, fn)
}
