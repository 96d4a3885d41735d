package sqlitestore

import "github.com/outboxd/outboxd/store"

// OnFeedWait makes the SQLite feed f call fn each time its Next found
// nothing and is about to wait.
func OnFeedWait(f store.Feed, fn func()) { f.(*feed).onWait = fn }
